"""The MongoDB fencing guard on a real collection (MongoDB-wire server): the
token check and the write are one conditional update; an older token raises
StaleToken and writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient, ReturnDocument
from pymongo.collection import Collection

from lease_integrations import ConfigurationError, StaleToken, connect
from lease_integrations.core.fencing import MongoFence


@pytest.fixture
def orders(mongo_url: str) -> Iterator[Collection[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url)
    collection = client.get_default_database()[f"orders_{uuid.uuid4().hex[:8]}"]
    collection.insert_one({"_id": 42, "state": "new"})
    yield collection
    client.close()


def test_newer_and_equal_tokens_write_older_ones_are_refused(
    orders: Collection[dict[str, Any]],
) -> None:
    fence = MongoFence()
    fence.update_one(orders, {"_id": 42}, {"$set": {"state": "paid"}}, 3)
    fence.update_one(orders, {"_id": 42}, {"$set": {"note": "same holder"}}, 3)
    with pytest.raises(StaleToken) as stale:
        fence.update_one(orders, {"_id": 42}, {"$set": {"state": "refunded"}}, 2)
    assert stale.value.token == 2 and stale.value.newest == 3
    fence.update_one(orders, {"_id": 42}, {"$set": {"state": "shipped"}}, 5)
    doc = orders.find_one({"_id": 42})
    assert doc == {"_id": 42, "state": "shipped", "note": "same holder", "fence_token": 5}
    assert fence.newest(orders, {"_id": 42}) == 5


def test_a_pipeline_update_is_fenced_too(orders: Collection[dict[str, Any]]) -> None:
    fence = MongoFence(field="writer_token")
    fence.update_one(orders, {"_id": 42}, [{"$set": {"state": "paid", "at": "$$NOW"}}], 7)
    with pytest.raises(StaleToken):
        fence.update_one(orders, {"_id": 42}, [{"$set": {"state": "late"}}], 6)
    doc = orders.find_one({"_id": 42})
    assert doc is not None and doc["state"] == "paid" and doc["writer_token"] == 7


def test_upsert_by_id_creates_once_then_refuses_a_stale_writer(
    orders: Collection[dict[str, Any]],
) -> None:
    fence = MongoFence()
    result = fence.update_one(orders, {"_id": "new-order"}, {"$set": {"state": "new"}}, 4,
                              upsert=True)
    assert result.upserted_id == "new-order"
    with pytest.raises(StaleToken):  # the guard fails, the upsert collides on _id
        fence.update_one(orders, {"_id": "new-order"}, {"$set": {"state": "late"}}, 3,
                         upsert=True)
    assert orders.count_documents({"_id": "new-order"}) == 1
    assert orders.find_one({"_id": "new-order"}) == {"_id": "new-order", "state": "new",
                                                      "fence_token": 4}


def test_a_missing_document_is_not_a_stale_token(orders: Collection[dict[str, Any]]) -> None:
    result = MongoFence().update_one(orders, {"_id": "nope"}, {"$set": {"x": 1}}, 1)
    assert result.matched_count == 0


def test_guard_and_stamp_compose_into_one_operation(orders: Collection[dict[str, Any]]) -> None:
    fence = MongoFence()
    doc = orders.find_one_and_update(fence.guard({"_id": 42}, 9),
                                     fence.stamp({"$set": {"state": "paid"}}, 9),
                                     return_document=ReturnDocument.AFTER)
    assert doc is not None and doc["fence_token"] == 9
    assert orders.find_one_and_update(fence.guard({"_id": 42}, 8),
                                      fence.stamp({"$set": {"state": "late"}}, 8)) is None


def test_lease_tokens_fence_a_late_holder(mongo_url: str, orders: Collection[dict[str, Any]],
                                          key: str) -> None:
    fence = MongoFence()
    with connect(mongo_url) as store:
        old = store.acquire(key, "old", "old", 30, {}).record
        assert old is not None and store.force_release(key, by="ops") is not None
        new = store.acquire(key, "new", "new", 30, {}).record
        assert new is not None
        fence.update_one(orders, {"_id": 42}, {"$set": {"by": "new"}}, new.token)
        with pytest.raises(StaleToken):
            fence.update_one(orders, {"_id": 42}, {"$set": {"by": "old"}}, old.token)
    assert orders.find_one({"_id": 42}, {"by": 1}) == {"_id": 42, "by": "new"}


@pytest.mark.parametrize("field", ["", "a.b", "$x", "x" * 101])
def test_bad_field_names_are_refused(field: str) -> None:
    with pytest.raises(ConfigurationError, match="fence field"):
        MongoFence(field=field)


@pytest.mark.parametrize("token", [0, -1, True, 1.5, "3"])
def test_bad_tokens_are_refused(token: Any, orders: Collection[dict[str, Any]]) -> None:
    with pytest.raises(ConfigurationError, match="fencing token"):
        MongoFence().update_one(orders, {"_id": 42}, {"$set": {"x": 1}}, token)


def test_the_update_may_not_set_the_fence_field_itself() -> None:
    with pytest.raises(ConfigurationError, match="must not set the fence field"):
        MongoFence().stamp({"$set": {"fence_token": 99}}, 1)

"""Meta is checked before any work: a bad value is a ConfigurationError
naming the key path, on every store alike, never a StoreUnavailable (a bad
value must not look like an outage) and never a change to the record."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lease_integrations import ConfigurationError, LeaseLock, LeaseStore, connect
from lease_integrations.core.validation import META_MAX_BYTES, validate_meta

BAD: dict[str, tuple[Any, str]] = {
    "nan": ({"load": float("nan")}, r"meta\['load'\] is nan"),
    "inf": ({"deep": [1, {"x": float("-inf")}]}, r"meta\['deep'\]\[1\]\['x'\] is -inf"),
    "nul value": ({"note": "a\x00b"}, r"meta\['note'\] contains a NUL"),
    "nul key": ({"a\x00": 1}, "NUL"),
    "not a dict": ([("dag_id", "x")], "must be a dict"),
    "str": ("dag_id=x", "must be a dict"),
    "int key": ({1: "x"}, "JSON keys are strings"),
    "object": ({"when": object()}, r"meta\['when'\] is a builtins.object, not a JSON value"),
    "huge int": ({"n": 2**64}, "outside 64 bits"),
    "oversized": ({"blob": "x" * META_MAX_BYTES}, f"larger than {META_MAX_BYTES} bytes"),
    "10 MB": ({"blob": "x" * (10 * 1024 * 1024)}, f"larger than {META_MAX_BYTES} bytes"),
}


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def meta_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseStore]:
    url: str = {"memory": f"memory://meta-{uuid.uuid4().hex}",
                "sqlite": f"sqlite://{tmp_path}/leases.db"}.get(request.param) \
        or request.getfixturevalue(f"{request.param}_url")
    store = connect(url)
    yield store
    store.close()


def snapshot(store: LeaseStore, key: str) -> tuple[Any, ...]:
    record = store.get(key)
    assert record is not None
    # expires_at of a released record is not kept exactly by every store.
    return (record.holder, record.token, record.acquired_at, record.renewed_at,
            record.meta, len(store.history(key)))


def test_bad_meta_is_a_configuration_error_and_changes_nothing(meta_store: LeaseStore,
                                                                key: str) -> None:
    # A released record with good meta: any write would show in it or in its history.
    with LeaseLock(meta_store, key, ttl=5, meta={"ok": 1}).hold():
        pass
    before = snapshot(meta_store, key)
    for name, (meta, message) in BAD.items():
        with pytest.raises(ConfigurationError, match=message):
            LeaseLock(meta_store, key, ttl=5, meta=meta)
        with pytest.raises(ConfigurationError, match=message):
            LeaseLock(meta_store, key, ttl=5).acquire(meta=meta)
        with pytest.raises(ConfigurationError, match=message), \
                LeaseLock(meta_store, key, ttl=5).hold(meta=meta):
            pytest.fail(f"{name}: the block ran")
        assert snapshot(meta_store, key) == before, name


def test_the_limit_applies_to_the_merged_meta(meta_store: LeaseStore, key: str) -> None:
    half = "x" * (META_MAX_BYTES // 2)
    lock = LeaseLock(meta_store, key, ttl=5, meta={"a": half})
    with pytest.raises(ConfigurationError, match="bytes as JSON"):
        lock.acquire(meta={"b": half})
    assert meta_store.get(key) is None


def test_good_meta_comes_back_as_written(meta_store: LeaseStore, key: str) -> None:
    meta = {"dag_id": "billing", "try_number": 2, "ratio": 0.5, "tags": ("a", "b"),
            "nested": {"ok": True, "none": None}, "big": 2**63 - 1, "text": "line\nnext\x1b[0m"}
    with LeaseLock(meta_store, key, ttl=5).hold(meta=meta):
        record = meta_store.get(key)
        assert record is not None
        assert {k: record.meta[k] for k in meta} == validate_meta(meta)


def test_a_lone_surrogate_is_a_configuration_error_naming_the_path() -> None:
    """issue 24 item 5: it cannot be encoded as UTF-8, so no store keeps it
    alike; validate_meta raised UnicodeEncodeError, not its documented error."""
    for meta, path in (({"note": "a\ud800"}, r"meta\['note'\]"),
                       ({"deep": [{"x": "\udfffb"}]}, r"meta\['deep'\]\[0\]\['x'\]"),
                       ({"k\udc80": 1}, r"meta\['k\\udc80'\]")):
        with pytest.raises(ConfigurationError, match=path + ".*surrogate") as caught:
            validate_meta(meta)
        assert "\\u" in str(caught.value) or "\\x" in str(caught.value) or "surrogate" in str(caught.value)
        str(caught.value).encode("utf-8")  # the message itself is printable

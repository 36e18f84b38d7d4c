"""The bucket store when a write lands and its answer is lost.

boto3 retries a PUT whose answer never came (a dropped connection, a 5xx
after the write). The retry carries the same condition, which the landed
write has just made false, so the store answers 412 to the caller's own
change. Taken for "another writer got in first", a release came back
refused although it had released, an acquire found the key held by its own
grant (and left it to expire), a renew reported the lease gone. Found in
the conformance suite's break race under load: a taker's release refused
with no breaker having broken it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lease_integrations import connect

RECORD = "/leases/"


def _proxied(s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    proxy, url = s3_proxy_factory()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    return proxy, connect(url)


def _puts(proxy: Any) -> int:
    return len([p for m, p in proxy.seen if m == "PUT" and RECORD in p])


def test_an_acquire_whose_answer_is_lost_is_granted_once(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, store = _proxied(s3_proxy_factory, monkeypatch)
    store.acquire("warm", "w", "s", 30.0, {})  # the probe and the first connection are done
    rule = proxy.add("PUT", RECORD + "billing", "lose")
    result = store.acquire("billing", "alice", "secret-a", 30.0, {})
    assert rule.matched == 1
    assert result.granted, result.record
    current = store.get("billing")
    assert current is not None and (current.holder, current.token) == ("alice", result.record.token)
    assert [e.kind for e in store.history("billing")] == ["acquired"]


def test_a_renew_whose_answer_is_lost_is_kept(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, store = _proxied(s3_proxy_factory, monkeypatch)
    record = store.acquire("billing", "alice", "secret-a", 30.0, {}).record
    assert record is not None
    rule = proxy.add("PUT", RECORD + "billing", "lose")
    assert store.renew("billing", "secret-a", record.token, 30.0)
    assert rule.matched == 1
    assert store.release("billing", "secret-a", record.token)


def test_a_release_whose_answer_is_lost_reports_released(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, store = _proxied(s3_proxy_factory, monkeypatch)
    record = store.acquire("billing", "alice", "secret-a", 30.0, {}).record
    assert record is not None
    before = _puts(proxy)
    rule = proxy.add("PUT", RECORD + "billing", "lose")
    assert store.release("billing", "secret-a", record.token)
    assert rule.matched == 1
    # The lost write and boto3's retry of it (refused: the write itself moved
    # the ETag); no third write releasing again.
    assert _puts(proxy) - before == 2
    assert [e.kind for e in store.history("billing")] == ["acquired", "released"]
    again = store.acquire("billing", "bob", "secret-b", 30.0, {})
    assert again.granted and again.record is not None and again.record.token > record.token


def test_a_break_whose_answer_is_lost_returns_what_it_broke(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, store = _proxied(s3_proxy_factory, monkeypatch)
    record = store.acquire("billing", "alice", "secret-a", 30.0, {}).record
    assert record is not None
    rule = proxy.add("PUT", RECORD + "billing", "lose")
    before = store.force_release("billing", "ops", token=record.token)
    assert rule.matched == 1
    assert before is not None and before.token == record.token
    assert [e.kind for e in store.history("billing")] == ["acquired", "broken"]

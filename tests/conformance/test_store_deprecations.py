"""Every store operation runs free of DeprecationWarning, on each Python and
client release the tests run with: what warns today fails in a coming
release. (Python 3.12 and 3.13 warned on the SQLite acquire's numbered
``?1`` placeholders bound from a sequence, which Python 3.14 refuses.)"""

from __future__ import annotations

import warnings

from lease_integrations import LeaseStore


def test_store_operations_raise_no_deprecation_warning(store: LeaseStore, key: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        granted = store.acquire(key, "alice", "alice-secret", 30.0, {"dag_id": "billing"}).record
        assert granted is not None
        assert not store.acquire(key, "bob", "bob-secret", 30.0, {}).granted
        assert store.renew(key, "alice-secret", granted.token, 30.0)
        assert list(store.renew_many([(key, "alice-secret", granted.token, 30.0)])) == [True]
        assert store.get(key) is not None and store.list(key)
        store.record_event(key, "lost", "alice", granted.token, {"why": "test"})
        assert store.release(key, "alice-secret", granted.token)
        again = store.acquire(key, "bob", "bob-secret", 30.0, {}).record
        assert again is not None and again.token > granted.token
        assert store.force_release(key, by="operator", token=again.token) is not None
        assert [e.kind for e in store.history(key)][-2:] == ["acquired", "broken"]
        store.wait_for_release(key, 0.01)  # True or False: a wake-up may be left over

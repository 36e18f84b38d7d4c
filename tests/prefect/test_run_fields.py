"""The fields a flow run writes into its lease meta for ``supersede_if``
guards (``prefect/run_fields``): one digest however the parameters were
passed, parameters too large or not storable kept as the digest only, and
always storable as meta."""

from __future__ import annotations

from typing import Any

from lease_integrations import LeaseLock, connect
from lease_integrations.core.supersede_guards import only_same
from lease_integrations.prefect.run_fields import run_fields


def billing(tenant: str, day: int = 1, options: Any = None) -> None:
    """A flow function's signature."""


def test_one_digest_however_the_parameters_were_passed() -> None:
    by_position = run_fields(billing, ("acme",), {})
    by_name = run_fields(billing, (), {"tenant": "acme", "day": 1})
    assert by_position == by_name
    assert by_position["parameters"] == {"tenant": "acme", "day": 1, "options": None}
    assert run_fields(billing, ("acme", 2), {})["parameters_sha256"] != \
        by_position["parameters_sha256"]
    assert only_same("parameters_sha256")(by_position, by_name)
    assert "scheduled_start" not in by_position  # outside a flow run: no schedule


def test_parameters_meta_cannot_keep_are_kept_as_their_digest_only(key: str) -> None:
    big = run_fields(billing, ("acme",), {"options": "x" * 5000})
    nan = run_fields(billing, ("acme",), {"options": float("nan")})
    surrogate = run_fields(billing, ("\ud800",), {})
    deep: Any = "leaf"
    for _ in range(20):
        deep = [deep]
    nested = run_fields(billing, ("acme",), {"options": deep})
    for fields in (big, nan, surrogate, nested):
        assert "parameters" not in fields and len(fields["parameters_sha256"]) == 64
        # ... and what is kept is always valid meta: the lease is taken.
        lock = LeaseLock(connect(f"memory://{key}"), key, ttl=5, on_lost="check", meta=fields)
        lock.release(lock.acquire())
    assert len({f["parameters_sha256"] for f in (big, nan, surrogate, nested)}) == 4

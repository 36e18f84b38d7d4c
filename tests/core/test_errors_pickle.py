"""Errors cross process boundaries: Airflow and Prefect pickle a failed run's
exception. Each must come back with its message and fields intact."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

import pytest

from lease_integrations import (
    ConfigurationError,
    LeaseBusy,
    LeaseLost,
    LeaseRecord,
    StaleToken,
    StoreUnavailable,
)
from lease_integrations.core import CorruptRecord

NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)
RECORD = LeaseRecord("billing", "host:1", 7, NOW, NOW, NOW, NOW, {"dag_id": "d\nforged"})


@pytest.mark.parametrize("error", [
    LeaseLost("billing", 7, "the store refused the renewal"),
    LeaseBusy("billing", RECORD),
    CorruptRecord("billing", "token", "not a token: 'x'"),
    StaleToken("ledger", 3, 5),
    StoreUnavailable("Redis error: timeout", url="redis://localhost:6379/0"),
    ConfigurationError("bad ttl"),
], ids=lambda e: type(e).__name__)
def test_errors_survive_pickling(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert vars(again) == vars(error)


def test_busy_message_escapes_control_characters_in_meta() -> None:
    message = str(LeaseBusy("billing", RECORD))
    assert "\n" not in message and "dag_id=d\\nforged" in message


def test_no_such_connection_survives_pickling() -> None:
    pytest.importorskip("airflow")
    from lease_integrations.airflow.connections import NoSuchConnection

    error = NoSuchConnection("lease_typo")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is NoSuchConnection and str(again) == str(error)
    assert again.conn_id == "lease_typo"

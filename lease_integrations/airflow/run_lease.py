"""What every task of a DAG run knows about the run's lease, and its secret.

The acquire task pushes the lease to XCom (key, token, ttl, store, a random
nonce); the other tasks and the keeper read it back and adopt the lease. XCom
is shown in the UI, so the owner secret never goes there: each process
derives it as ``HMAC-SHA256(run secret key, key|dag_id|run_id|nonce)``, the
key being ``[lease_integrations] run_secret_key`` or else ``[core]
fernet_key`` (see ``docs/airflow/dag-run-lease.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass
from typing import Any

from lease_integrations import ConfigurationError, LeaseLock, LeaseLost, LeaseStore, connect
from lease_integrations.core import AcquireResult, mask_url, resolve_url

from .connections import resolve_store_url

XCOM_KEY = "dag_run_lease"
#: Where the guard puts the run's lease in a work task's context.
CONTEXT_KEY = "dag_run_lease"
DEFAULT_TASK_PREFIX = "dag_run_lease"
SECRET_OPTION = ("lease_integrations", "run_secret_key")
#: Where the run secret key comes from when the option above is unset.
FERNET_OPTION = ("core", "fernet_key")
#: Shorter keys are refused: 32 characters of a generated key carry well over
#: 128 bits (a Fernet key has 44).
MIN_SECRET_KEY_LENGTH = 32
#: An unexpanded template default, as ``conf`` returns one for an unset option.
PLACEHOLDER = re.compile(r"\{[A-Za-z0-9_]+\}")
GENERATE = ("generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))' "
            "(the same value on every worker and triggerer)")


@dataclass(frozen=True)
class DagRunLease:
    """The run's lease as its tasks see it. ``token`` is what fenced writes carry."""

    key: str
    token: int
    ttl: float
    heartbeat: float
    conn_id: str
    dag_id: str
    run_id: str
    #: Random per acquisition, public: one input of the derived secret.
    nonce: str
    #: The store URL the acquire task used, when it carries no password (else
    #: None, and each process resolves ``conn_id`` itself). Pins every task of
    #: the run to the very store the lease was taken in.
    store_url: str | None = None

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> DagRunLease:
        return cls(key=str(value["key"]), token=int(value["token"]), ttl=float(value["ttl"]),
                   heartbeat=float(value["heartbeat"]), conn_id=str(value["conn_id"]),
                   dag_id=str(value["dag_id"]), run_id=str(value["run_id"]),
                   nonce=str(value["nonce"]), store_url=value.get("store_url"))

    def connect(self) -> LeaseStore:
        """The run's store, as the acquire task reached it."""
        return connect(self.store_url or resolve_store_url(self.conn_id))

    def lock(self, store: LeaseStore) -> LeaseLock:
        return LeaseLock(store, self.key, ttl=self.ttl, heartbeat=self.heartbeat)

    def secret(self) -> str:
        """The owner secret, derived here (never stored in XCom)."""
        return run_secret(self.key, self.dag_id, self.run_id, self.nonce)


def run_secret(key: str, dag_id: str, run_id: str, nonce: str) -> str:
    message = "\0".join(("dag-run-lease", key, dag_id, run_id, nonce)).encode()
    return hmac.new(_secret_key(), message, hashlib.sha256).hexdigest()[:32]


def _secret_key() -> bytes:
    """``[lease_integrations] run_secret_key``, else ``[core] fernet_key``,
    refused unless it is a real secret. The Task SDK's ``conf`` returns the
    unexpanded default text ``{FERNET_KEY}`` for an unset fernet key: keyed
    with that public constant, anyone could compute a run's secret from its
    public XCom value and renew or release its lease. A run secret key that
    is set but bad is refused too, never passed over for the fernet key."""
    from ._compat import airflow_conf

    conf = airflow_conf()
    run_key = conf.get(*SECRET_OPTION, fallback=None)
    if run_key:
        return _checked(str(run_key), SECRET_OPTION)
    fernet = conf.get(*FERNET_OPTION, fallback=None)
    if fernet:
        return _checked(str(fernet), FERNET_OPTION)
    raise ConfigurationError(
        f"the DAG-run lease needs a secret key shared by workers and the triggerer: set "
        f"{_setting(SECRET_OPTION)} or {_setting(FERNET_OPTION)}; {GENERATE}")


def _setting(option: tuple[str, str]) -> str:
    section, name = option
    return f"[{section}] {name} (AIRFLOW__{section.upper()}__{name.upper()})"


def _checked(value: str, option: tuple[str, str]) -> bytes:
    """The key as bytes, or a ConfigurationError naming the setting and what
    is wrong with it (never the value, unless it is a public placeholder)."""
    text = value.strip()
    if PLACEHOLDER.fullmatch(text):
        problem = f"is the unexpanded placeholder {text!r}, a constant anyone knows (it is not set)"
    elif len(text) < MIN_SECRET_KEY_LENGTH:
        problem = (f"is {len(text)} characters long; the DAG-run lease needs at least "
                   f"{MIN_SECRET_KEY_LENGTH}")
    else:
        return value.encode()
    hint = "" if option == SECRET_OPTION else f"set {_setting(SECRET_OPTION)} or fix it; "
    raise ConfigurationError(f"{_setting(option)} {problem}: the DAG-run lease derives its "
                             f"owner secret from it. {hint}{GENERATE}")


def acquire_for_run(store: LeaseStore, key: str, holder: str, secret: str, ttl: float,
                    meta: Mapping[str, Any]) -> AcquireResult:
    """One acquire attempt as the run's holder, with the derived secret."""
    return store.acquire(key, holder, secret, ttl, meta)


def release_run_lease(info: DagRunLease) -> str:
    """Give the run's lease back iff the store still has the run's token (the
    teardown, and the keeper once the run is over); says what happened."""
    with info.connect() as store:
        lock = info.lock(store)
        try:
            lease = lock.adopt(info.token, info.secret())
        except LeaseLost as lost:
            return (f"run lease {info.key} (token {info.token}) was no longer this run's "
                    f"({lost.reason}); left untouched")
        released = lock.release(lease)
    return (f"released run lease {info.key} (token {info.token})"
            + ("" if released else ": the store no longer had it"))


#: Holds a failed ``execute`` left open (its post_execute never ran): closed
#: before the next guarded task or the teardown in the same process (dag.test()).
open_holds: list[ExitStack] = []


def leave_leftover_holds() -> None:
    while open_holds:
        with suppress(LeaseLost):
            open_holds.pop().close()


def shareable_url(url: str | None) -> str | None:
    """``url`` (None: the default store) as a full URL, or None if it holds a
    password (which must not be copied into XCom or trigger arguments)."""
    resolved = resolve_url(url)
    return resolved if mask_url(resolved) == resolved else None


def dag_run_lease_of(context: Mapping[str, Any],
                     acquire_task_id: str = f"{DEFAULT_TASK_PREFIX}_acquire") -> DagRunLease | None:
    """The run's lease, from any task of the run (None if the run took none).

    Tasks inside ``dag_run_lease(...)`` already find it in their context; other
    tasks pull it from the acquire task's XCom (name that task if the lease was
    declared with another ``task_prefix`` or inside a task group)."""
    found = context.get(CONTEXT_KEY)
    if isinstance(found, DagRunLease):
        return found
    value = context["ti"].xcom_pull(task_ids=acquire_task_id, key=XCOM_KEY)
    return DagRunLease.from_xcom(value) if value else None

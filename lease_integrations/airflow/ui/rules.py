"""Who may read a lease, break it, or learn that it exists, and proof that a
break was meant: the same on every Airflow version. The rule itself is
written once, in docs/operating/security.md ("Who may see and break
leases"); here it is one method per question on ``Access``, asked by every
route of both faces (``app.py`` on Airflow 3, ``fab_view.py`` on 2.11).

The auth manager decides (FAB, Keycloak or a custom one may grant per DAG;
the same ``is_authorized_custom_view`` / ``is_authorized_dag`` calls exist on
2.11 and 3.x). A row or event belongs to a DAG when its meta names a
``dag_id`` or when its holder is a DAG run's (``dagrun:<dag_id>:<run_id>``);
to no DAG when it carries meta that names none (a flow's, a script's). An
event that carries no meta (written by an earlier version, or a ``lost``
event) is placed by the token of an event or record that is placed: one token
is one grant. An event that still cannot be placed could be any DAG's, so
only a user who may read every DAG sees it (issue 40, finding 1: a window
that cut off a release's ``acquired`` event served that release, of another
DAG, as one of no DAG).

A break arrives with the browser's cookie, so a page on another site could
post one: every break must also carry either the ``X-Lease-Break`` header
(which a cross-site form cannot set, and a cross-origin script cannot send
without a CORS pre-flight the server refuses) or a confirmation token that
only our confirm page hands out, bound to the user, the key and the lease
token that page showed, signed with the webserver's own secret key.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lease_integrations.core import LeaseEvent, LeaseRecord

#: The resource name a non-simple auth manager grants ``GET`` and ``DELETE``
#: on (FAB: the ``can_read`` and ``can_delete`` permissions on ``Leases``).
RESOURCE = "Leases"
#: The header a script or API client sends with a break: value = the key.
BREAK_HEADER = "X-Lease-Break"
#: How long a confirm page's token stays good (seconds).
TOKEN_LIFETIME = 900
#: The holder name of a DAG run's lease (``run_lease_tasks``): ``dagrun:<dag_id>:<run_id>``.
DAG_RUN_HOLDER = "dagrun:"


class Refused(Exception):
    """A request the rules refuse: each face answers it in its own way (a
    page or JSON), with this status and text."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def not_found(key: str, what: str = "no lease") -> Refused:
    """The answer for a missing key and for a key the user may not read alike."""
    return Refused(404, f"{what} {key!r}")


def user_name(user: Any) -> str:
    """The name recorded in history as who broke a lease."""
    return str(user.get_name())


def dag_of(meta: Any, holder: str | None) -> str | None:
    """The DAG a record or event names: its meta's ``dag_id``, else the one in
    a DAG-run holder's name; None for a row of no DAG (a flow's, a script's)."""
    dag_id = meta.get("dag_id") if isinstance(meta, Mapping) else None
    if dag_id is not None and dag_id != "":
        return str(dag_id)
    if isinstance(holder, str) and holder.startswith(DAG_RUN_HOLDER):
        return holder[len(DAG_RUN_HOLDER):].partition(":")[0] or None
    return None


class _Unplaced:
    """The DAG of an event that names none and shares its token with nothing
    that does: it could be any DAG's."""

    def __repr__(self) -> str:
        return "UNPLACED"


UNPLACED = _Unplaced()


def _own_dag(event: LeaseEvent) -> str | _Unplaced | None:
    """The DAG an event names itself: from its meta (None: meta of no DAG)
    or a DAG-run holder; ``UNPLACED`` when it carries neither."""
    meta = event.detail.get("meta") if isinstance(event.detail, Mapping) else None
    if isinstance(meta, Mapping):
        return dag_of(meta, event.holder)
    return dag_of(None, event.holder) or UNPLACED


def event_dags(events: Iterable[LeaseEvent], record: LeaseRecord | None = None
               ) -> list[str | _Unplaced | None]:
    """The DAG of each event, in order. An event that names none itself takes
    the DAG of another event (or of the record) with the same token: one token
    is one grant, so they belong to the same run. What is left is ``UNPLACED``."""
    events = list(events)
    by_token: dict[int, str | None] = {}
    if record is not None and (named := dag_of(record.meta, record.holder)) is not None:
        by_token[record.token] = named
    own = [_own_dag(e) for e in events]
    for event, placed in zip(events, own):
        if not isinstance(placed, _Unplaced):
            by_token.setdefault(event.token, placed)
    return [by_token.get(e.token, UNPLACED) if isinstance(placed, _Unplaced) else placed
            for e, placed in zip(events, own)]


class Access:
    """One request's user and the auth manager's answers (one call per
    question and DAG): the only place the per-DAG rule is decided.

    ``dag_details`` is the auth manager's ``DagDetails`` class (its module
    moved between 2.11 and 3.x); ``admin_by_role`` is for Airflow 3's
    SimpleAuthManager, whose custom-view check ignores method and resource,
    so only its Admin role may break."""

    def __init__(self, user: Any, manager: Any, dag_details: Any, *,
                 admin_by_role: bool = False) -> None:
        self.user = user
        self._manager = manager
        self._dag_details = dag_details
        self._admin_by_role = admin_by_role
        self._dags: dict[str, bool] = {}
        self._page: bool | None = None
        self._all_dags: bool | None = None
        self._break: bool | None = None

    def may_read_page(self) -> bool:
        """``GET`` on the custom view ``Leases``."""
        if self._page is None:
            self._page = bool(self._manager.is_authorized_custom_view(
                method="GET", resource_name=RESOURCE, user=self.user))
        return self._page

    def may_read_all_dags(self) -> bool:
        """Read on every DAG (``DagDetails`` none: FAB's ``can_read`` on ``DAGs``)."""
        if self._all_dags is None:
            self._all_dags = bool(self._manager.is_authorized_dag(
                method="GET", details=None, user=self.user))
        return self._all_dags

    def may_read_dag(self, dag_id: str) -> bool:
        found = self._dags.get(dag_id)
        if found is None:
            found = self._dags[dag_id] = bool(self._manager.is_authorized_dag(
                method="GET", details=self._dag_details(id=dag_id), user=self.user))
        return found

    def may_break_leases(self) -> bool:
        """The page's permission and ``DELETE`` on ``Leases``."""
        if self._break is None:
            if self._admin_by_role:
                allowed = str(getattr(self.user, "role", "") or "").upper() == "ADMIN"
            else:
                allowed = bool(self._manager.is_authorized_custom_view(
                    method="DELETE", resource_name=RESOURCE, user=self.user))
            self._break = allowed and self.may_read_page()
        return self._break

    # -- the three questions (docs/operating/security.md) ---------------------
    def may_read(self, dag_id: str | _Unplaced | None) -> bool:
        """May this user read a row or event of ``dag_id`` (None: of no DAG;
        ``UNPLACED``: of a DAG nobody can tell) on the Leases page or its JSON?"""
        if not self.may_read_page():
            return False
        if isinstance(dag_id, _Unplaced):
            return self.may_read_all_dags()
        return dag_id is None or self.may_read_dag(dag_id)

    def may_learn_exists(self, record: LeaseRecord | None) -> bool:
        """May the user learn that this record exists? Exactly when they may
        read it: a record they may not read answers as a missing key does."""
        return record is not None and self.may_read(dag_of(record.meta, record.holder))

    def may_break(self, record: LeaseRecord) -> bool:
        """May the user break this very record (its token, nothing else)?"""
        return self.may_learn_exists(record) and self.may_break_leases()

    # -- filters and refusals ---------------------------------------------------
    def records(self, records: Iterable[LeaseRecord]) -> list[LeaseRecord]:
        return [r for r in records if self.may_learn_exists(r)]

    def events(self, events: Iterable[LeaseEvent], record: LeaseRecord | None) -> list[LeaseEvent]:
        events = list(events)
        return [e for e, dag in zip(events, event_dags(events, record)) if self.may_read(dag)]

    def require_page(self) -> None:
        if not self.may_read_page():
            raise Refused(403, f"user {user_name(self.user)!r} may not view leases (needs GET on "
                               f"{RESOURCE!r})")

    def require_dag(self, dag_id: str) -> None:
        if not self.may_read_dag(dag_id):
            raise Refused(403, f"user {user_name(self.user)!r} may not read DAG {dag_id!r}")

    def require_break_permission(self) -> None:
        if not self.may_break_leases():
            raise Refused(403, f"user {user_name(self.user)!r} may not break leases (needs GET and "
                               f"DELETE on {RESOURCE!r}; the Admin role under SimpleAuthManager)")


def _mac(secret: bytes, user: Any, key: str, token: int, issued: int) -> str:
    message = "\0".join(("lease-break", str(user.get_id()), key, str(token), str(issued)))
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def confirm_token(secret: bytes, user: Any, key: str, token: int) -> str:
    """The token the confirm page puts in its form."""
    issued = int(time.time())
    return f"{issued}.{_mac(secret, user, key, token, issued)}"


def check_confirm_token(secret: bytes, value: str, user: Any, key: str, token: int) -> bool:
    issued_text, _, mac = value.partition(".")
    if not issued_text.isdigit() or not mac:
        return False
    issued = int(issued_text)
    if not 0 <= time.time() - issued <= TOKEN_LIFETIME:
        return False
    return hmac.compare_digest(mac, _mac(secret, user, key, token, issued))


def require_intent(secret: bytes, user: Any, key: str, token: int | None, *, header: str | None,
                   confirm: str | None, header_honoured: bool = True) -> None:
    """403 unless the break carries the header or a valid confirm token. The
    refusal names only what this face honours: Airflow 2.11's view has no
    route that reads the header (``header_honoured=False``)."""
    if header_honoured and header is not None and header == key:
        return
    if confirm and token is not None and check_confirm_token(secret, confirm, user, key, token):
        return
    if not header_honoured:
        raise Refused(403, "a break needs the confirmation token from the Leases page; open the "
                           "page and confirm again (scripts: leasectl break)")
    raise Refused(403, f"a break needs the {BREAK_HEADER} header (value: the key) or the "
                       "confirmation token from the Leases page; open the page and confirm again")

"""Prefect events for a lease's life, related to the flow run that holds it:
``lease-integrations.lease.acquired``, ``.busy`` (skipped, waiting, failed,
timed out), ``.lost`` (with the reason) and ``.released``. The resource is the
lease (``lease-integrations.lease.<key>``), so an automation can watch one
key, every key, or every lease of one deployment; "notify me when a lease is
lost" is one automation on ``lease-integrations.lease.lost``.

Cheap: ``emit_event`` only queues the event for Prefect's events worker (a
thread of its own), so taking a lease makes no extra network round trip.
Best effort, like the run annotations: an event that cannot be emitted is
logged and the run goes on. The owner secret is never in an event.

A loss under fail-stop (``on_lost="exit"``) ends the process with
``os._exit``, which skips the drain Prefect registers for interpreter exit:
there the loss callback starts draining the events worker at once, while the
crash stop hook reports the run Crashed, and the hook then waits for the
drain (both bounded by the fail-stop ladder), so the ``lost`` event reaches
the API before the process ends. Events are emitted only inside a flow run (a test calling
``my_flow.fn()`` emits nothing).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from types import TracebackType
from typing import Any

from lease_integrations import Lease, LeaseBusy, LeaseLost

log = logging.getLogger("lease_integrations")

#: Every event name starts with this; the lease's resource id too.
EVENT_PREFIX = "lease-integrations.lease"
ACQUIRED = f"{EVENT_PREFIX}.acquired"
BUSY = f"{EVENT_PREFIX}.busy"
LOST = f"{EVENT_PREFIX}.lost"
RELEASED = f"{EVENT_PREFIX}.released"


def resource_id(key: str) -> str:
    """The Prefect resource id of the lease ``key``."""
    return f"{EVENT_PREFIX}.{key}"


class LeaseEvents:
    """The events of one hold of ``key`` by the flow run ``flow_run_id`` (None:
    no run, no events). Made on the run's thread: the loss is found on a
    heartbeat or fail-stop thread, and its event is emitted in the run's
    context (its API settings, and the run's flow and deployment, which
    Prefect's events worker adds as related resources)."""

    def __init__(self, key: str, flow_run_id: str | None, on_lost: str) -> None:
        self.key = key
        self.flow_run_id = flow_run_id
        self.on_lost = on_lost
        self.lease: Lease | None = None
        self._context = contextvars.copy_context()
        self._sending: threading.Thread | None = None

    # -- what the wrappers call ------------------------------------------------
    def busy(self, busy: LeaseBusy, outcome: str) -> None:
        """``outcome``: ``skipped``, ``waiting``, ``failed``, ``timed-out`` or
        ``refused`` (a supersede its guard refused)."""
        payload: dict[str, Any] = {
            "outcome": outcome, "holder": busy.holder, "holder_token": busy.token,
            "expires_at": busy.expires_at.isoformat() if busy.expires_at else None,
        }
        if busy.meta.get("flow_run_id"):
            payload["holder_flow_run_id"] = str(busy.meta["flow_run_id"])
        self._emit(BUSY, payload)

    def acquired(self, lease: Lease) -> None:
        self.lease = lease
        if self.flow_run_id is None:
            return
        self._emit(ACQUIRED, {**_about(lease), "ttl": lease.ttl})
        lease.on_lost(self._lost)  # at once if it is lost already

    def after_hold(self, kind: type[BaseException] | None, exc: BaseException | None,
                   tb: TracebackType | None) -> None:
        """Pushed on the wrapper's exit stack before the hold: runs once the
        hold has ended (and released the lease, or not)."""
        lease = self.lease
        if lease is None or self.flow_run_id is None or lease.lost.is_set():
            return  # never held, no run, or the loss callback has told it already
        if isinstance(exc, LeaseLost):  # the store refused the release, or the window closed
            self._emit(LOST, {**_about(lease), "reason": exc.reason, "on_lost": self.on_lost})
        elif lease.released:
            self._emit(RELEASED, {
                **_about(lease), "held_seconds": round(time.monotonic() - lease.attempt_started, 3),
            })

    # -- the loss ----------------------------------------------------------------
    def _lost(self, lease: Lease) -> None:
        """An ``on_lost`` callback: a heartbeat thread's (``check``, ``cancel``)
        or step 2 of the fail-stop ladder (``exit``), which bounds it."""
        self._emit(LOST, {**_about(lease), "reason": lease.lost_reason, "on_lost": self.on_lost})
        if lease.fail_stop and self.flow_run_id is not None:
            # The process ends soon: send the event now, beside the Crashed report.
            self._sending = threading.Thread(
                target=self._context.copy().run, args=(_flush,), name="lease-events-flush",
                daemon=True)
            self._sending.start()

    def wait_sent(self) -> None:
        """Under fail-stop, wait until the ``lost`` event has been sent (the
        crash stop hook's last step: the ladder bounds it)."""
        if self._sending is not None:
            self._sending.join()

    def _emit(self, event: str, payload: dict[str, Any]) -> None:
        if self.flow_run_id is None:
            return
        try:
            self._context.copy().run(_emit, event, self.key, self.flow_run_id,
                                     {"key": self.key, **payload})
        except Exception as exc:  # best effort: the run goes on
            log.warning("could not emit Prefect event %s for lease %s: %s", event, self.key, exc)


def _about(lease: Lease) -> dict[str, Any]:
    """What every event of a held lease says (never ``lease.secret``)."""
    return {"token": lease.token, "holder": lease.holder}


def _emit(event: str, key: str, flow_run_id: str, payload: dict[str, Any]) -> None:
    from prefect.events import emit_event

    emit_event(
        event=event,
        resource={"prefect.resource.id": resource_id(key), "prefect.resource.name": key},
        related=[{"prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
                  "prefect.resource.role": "flow-run"}],
        payload=payload,
    )


def _flush() -> None:
    """Send every queued event and close the events client (a clean close:
    the server has read all that came before), waiting for it. The worker of
    the current settings is the one ``emit_event`` used."""
    from prefect.events.worker import EventsWorker, should_emit_events

    try:
        if should_emit_events():
            EventsWorker.instance().drain()
    except Exception as exc:  # best effort: the process is ending anyway
        log.warning("could not send the lease events before the process ends: %s", exc)

"""The Prefect face's fail-stop hook: before a lost lease ends the process,
the flow run is reported Crashed with the reason, so the Prefect API never
shows a run that was stopped as Running (a run called in-process, with no
worker watching its exit status, would stay Running for ever). The flow runs
that called it in this process (a ``@leased_flow`` used as a subflow) end
with the process too, and are reported Crashed with it. Last, the hook waits
for the ``lost`` event (``events``), sent meanwhile, to be out.

The hook has a small share of the lease's margin (``failstop``), and a loaded
machine makes every API call slow: so the callers are found when the run
starts, on a thread of their own, and a loss only writes the states, all at
once. Found at the loss, the walk (two reads per level) came before the
parents' report, and on a loaded machine the process ended between the two:
the parent stayed Running for ever.

A loss that is a supersede (another run replaced this one on purpose) is
reported Cancelled instead, naming the run that replaced it
(``superseded``); every other loss is Crashed."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from lease_integrations import Lease, LeaseStore

from .events import LeaseEvents
from .superseded import cancel_message, superseded

log = logging.getLogger("lease_integrations")


def crash_reporter(lease: Lease, flow_run_id: str | None, events: LeaseEvents,
                   store: LeaseStore | None = None) -> Callable[[], None]:
    """A stop hook that sets the run's state (and its in-process callers')
    to Crashed (Cancelled when superseded: ``store`` says by which run), then
    waits for the ``lost`` event to be sent. Made on the run's thread: the
    hook runs on fail-stop's, with the run's Prefect settings (API URL, an
    ephemeral server's address) carried over in its context."""
    context = contextvars.copy_context()
    callers = _find_callers(flow_run_id, context)

    def report() -> None:
        if flow_run_id is not None:
            try:
                context.run(_report, flow_run_id, lease, callers, store)
            finally:
                events.wait_sent()

    return report


def _find_callers(flow_run_id: str | None, context: contextvars.Context) -> Future[list[Any]]:
    """The in-process callers of ``flow_run_id``, looked up in the background.
    A run that is no subflow (the process's root, or a deployment's run) has
    none, and costs no request."""
    found: Future[list[Any]] = Future()
    if flow_run_id is None or not _may_be_called_in_process(flow_run_id):
        found.set_result([])
        return found

    def walk() -> None:
        from prefect.client.orchestration import get_client

        try:
            with get_client(sync_client=True) as client:
                found.set_result(list(_in_process_parents(client, flow_run_id)))
        except BaseException as exc:  # the report walks again at the loss
            found.set_exception(exc)

    threading.Thread(target=context.run, args=(walk,), name="lease-prefect-callers",
                     daemon=True).start()
    return found


def _may_be_called_in_process(flow_run_id: str) -> bool:
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None or str(run.id) != flow_run_id:
        return True  # not the run in context (``leased()`` elsewhere): ask the API
    return run.deployment_id is None and run.parent_task_run_id is not None


def _report(flow_run_id: str, lease: Lease, callers: Future[list[Any]],
            store: LeaseStore | None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Crashed

    final, name = (Cancelled, "Cancelled") if superseded(lease) else (Crashed, "Crashed")
    message = cancel_message(lease, store) if final is Cancelled else (
        f"lease {lease.key!r} (token {lease.token}) was lost: {lease.lost_reason}; "
        "the process was stopped")
    with get_client(sync_client=True) as client:
        def crash(run_id: Any, text: str, what: str) -> None:
            client.set_flow_run_state(run_id, final(message=text), force=True)
            log.info("reported flow run %s%s %s: %s", run_id, what, name, text)

        sending = [_send(crash, flow_run_id, message, "")]
        try:
            parents = callers.result()
        except Exception:
            parents = list(_in_process_parents(client, flow_run_id))
        sending += [_send(crash, parent_id, f"subflow run {flow_run_id}: {message}",
                          f" (a caller of {flow_run_id})") for parent_id in parents]
        for thread in sending:
            thread.join()


def _send(crash: Callable[[Any, str, str], None], *args: Any) -> threading.Thread:
    """One state write on a thread of its own (the client is thread-safe), so
    that every run's report is in flight at once."""
    context = contextvars.copy_context()

    def send() -> None:
        try:
            context.run(crash, *args)
        except Exception:
            log.exception("reporting flow run %s's end failed", args[0])

    thread = threading.Thread(target=send, name="lease-prefect-crash", daemon=True)
    thread.start()
    return thread


def _in_process_parents(client: Any, flow_run_id: str) -> Iterator[Any]:
    """The flow runs above ``flow_run_id`` that this process runs: the parent
    of each run that is a subflow called in-process. A run with a deployment
    of its own (the process's root, or one ``run_deployment`` started) ends
    the walk: its caller, if any, runs in another process and goes on."""
    run = client.read_flow_run(flow_run_id)
    seen = {run.id}
    while run.deployment_id is None and run.parent_task_run_id is not None:
        parent_id = client.read_task_run(run.parent_task_run_id).flow_run_id
        if parent_id is None or parent_id in seen:
            return
        seen.add(parent_id)
        run = client.read_flow_run(parent_id)
        if run.state is not None and run.state.is_final():
            return
        yield run.id

"""Prefect events for a lease's life, read back from a real Prefect server's
events API (``/events/filter``, what the UI's event feed and automations
see): ``acquired`` and ``released`` for a normal run, ``busy`` for a skipped
run and for a waiting one, and ``lost`` with its reason for a run whose lease
is broken from outside, sent before fail-stop ends the process (exit 75,
through ``os._exit``: Prefect's own drain at interpreter exit never runs),
and the guide's "lease lost" automation firing on it."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import flows_for_tests as ff
from prefect_helpers import break_when_working, run_states, wait_until

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, connect
from lease_integrations.prefect.events import ACQUIRED, BUSY, LOST, RELEASED, resource_id


def filter_events(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events the server's ``/events/filter`` answers ``body`` with."""
    import httpx

    response = httpx.post(f"{api}/events/filter", json=body, timeout=30)
    response.raise_for_status()
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def lease_events(api: str, flow_run_id: Any, expected: list[str]) -> list[dict[str, Any]]:
    """The lease events related to the flow run, oldest first, once their
    names are ``expected`` (the server persists events in batches: bounded wait)."""
    body = {"filter": {"event": {"prefix": ["lease-integrations.lease."]},
                       "related": {"id": [f"prefect.flow-run.{flow_run_id}"]},
                       "order": "ASC"},
            "limit": 50}

    def read() -> list[dict[str, Any]] | None:
        events = filter_events(api, body)
        return events if [e["event"] for e in events] == expected else None

    try:
        found: list[dict[str, Any]] = wait_until(read, 60, f"events {expected}")
    except AssertionError:
        raise AssertionError(f"expected {expected}, the server has "
                             f"{[e['event'] for e in filter_events(api, body)]}") from None
    for event in found:
        assert event["resource"]["prefect.resource.id"] == resource_id(event["payload"]["key"])
        assert event["resource"]["prefect.resource.name"] == event["payload"]["key"]
        roles = {r["prefect.resource.role"]: r["prefect.resource.id"] for r in event["related"]}
        assert roles["flow-run"] == f"prefect.flow-run.{flow_run_id}", event["related"]
        assert roles.get("flow", "").startswith("prefect.flow."), event["related"]
    return found


def release_once_a_run_waits(api: str, lock: LeaseLock, held: Any, since: str) -> None:
    """Release ``held`` once the server has a ``busy`` event for its key sent
    after ``since``: a run that found it held and waits. (A fixed delay raced a
    run started late under load, which then found the lease free.) Released
    anyway after the bound, so the run cannot hang; the test then fails on the
    missing event."""
    body = {"filter": {"event": {"name": [BUSY]},
                       "resource": {"id": [resource_id(held.key)]},
                       "occurred": {"since": since}},
            "limit": 1}

    try:
        wait_until(lambda: filter_events(api, body), 60, "a run waiting for the held lease")
    finally:
        lock.release(held)


def automation_events(api: str, automation_id: Any) -> list[dict[str, Any]]:
    """The automation's own events, once it has fired."""
    body = {"filter": {"resource": {"id": [f"prefect.automation.{automation_id}"]},
                       "order": "ASC"}, "limit": 50}

    def read() -> list[dict[str, Any]] | None:
        events = filter_events(api, body)
        fired = any(e["event"] == "prefect.automation.triggered" for e in events)
        return events if fired else None

    found: list[dict[str, Any]] = wait_until(read, 60, "the automation to fire")
    return found


def test_a_normal_run_emits_acquired_then_released(
        prefect_api: str, coord: Path, lease_url: str) -> None:
    state = ff.events_normal(return_state=True)
    assert state.is_completed(), state
    token = state.result()
    run_id = state.state_details.flow_run_id
    acquired, released = lease_events(prefect_api, run_id, [ACQUIRED, RELEASED])
    assert acquired["resource"]["prefect.resource.id"] == "lease-integrations.lease.events-normal"
    assert set(acquired["payload"]) == {"key", "token", "holder", "ttl"}
    assert acquired["payload"]["token"] == released["payload"]["token"] == token
    assert acquired["payload"]["ttl"] == ff.TTL
    assert set(released["payload"]) == {"key", "token", "holder", "held_seconds"}
    assert released["payload"]["holder"] == acquired["payload"]["holder"]
    assert released["payload"]["held_seconds"] >= 0
    secret = (coord / "secret").read_text()
    assert secret and secret not in json.dumps([acquired, released]), "the owner secret leaked"


def test_a_skipped_run_emits_busy_naming_the_holder(
        prefect_api: str, coord: Path, lease_url: str) -> None:
    lock = LeaseLock(connect(lease_url), "race-sync", ttl=30.0, on_lost="check")
    with lock.hold() as held:
        state = ff.race_sync_skip(return_state=True)
    assert state.is_cancelled(), state
    (busy,) = lease_events(prefect_api, state.state_details.flow_run_id, [BUSY])
    payload = busy["payload"]
    assert payload["outcome"] == "skipped", payload
    assert payload["key"] == "race-sync"
    assert (payload["holder"], payload["holder_token"]) == (held.holder, held.token)
    assert payload["expires_at"], payload
    assert held.secret not in json.dumps(busy)


def test_a_waiting_run_emits_busy_then_acquired_and_released(
        prefect_api: str, coord: Path, lease_url: str) -> None:
    (coord / "release").write_text("")  # the body returns at once once it gets in
    lock = LeaseLock(connect(lease_url), "race-sync", ttl=30.0, on_lost="check")
    since = datetime.now(timezone.utc).isoformat()
    held = lock.acquire()
    releaser = threading.Thread(target=release_once_a_run_waits,
                                args=(prefect_api, lock, held, since))
    releaser.start()
    state = ff.race_sync_wait(return_state=True)
    releaser.join()
    assert state.is_completed(), state
    busy, acquired, _ = lease_events(prefect_api, state.state_details.flow_run_id,
                                     [BUSY, ACQUIRED, RELEASED])
    assert busy["payload"]["outcome"] == "waiting", busy["payload"]
    assert busy["payload"]["holder_token"] == held.token
    assert acquired["payload"]["token"] > held.token


def test_a_broken_lease_emits_lost_with_the_reason_before_fail_stop_ends_the_process(
        prefect_api: str, spawn: Any, child_env: dict[str, str], coord: Path,
        lease_url: str) -> None:
    """The child's events client sends the ``lost`` event 1 s late: it
    reaches the server only because the stop hook waits for it (the ladder
    has 2.2 s), not because the worker happened to be quicker than the exit.
    The guide's automation (with a do-nothing action) fires on it."""
    from prefect.automations import Automation, DoNothing, EventTrigger

    automation = Automation(  # the guide's automation, with an action the test can see
        name="lease lost (test)",
        trigger=EventTrigger(
            match={"prefect.resource.id": "lease-integrations.lease.events-lost"},
            expect={"lease-integrations.lease.lost"},
            posture="Reactive", threshold=1, within=0,
        ),
        actions=[DoNothing()],
    ).create()
    child_env["LEASE_TEST_SLOW_LOST_EVENT"] = "1.0"
    child = spawn("events_lost")
    record = break_when_working(coord, lease_url, "events-lost", {"body"})
    assert child.wait(60) == LEASE_LOST_EXIT_STATUS, child.output()
    acquired, lost = lease_events(prefect_api, record["run"], [ACQUIRED, LOST])
    assert acquired["payload"]["token"] == lost["payload"]["token"] == record["token"]
    assert lost["payload"]["holder"] == record["holder"]
    assert lost["payload"]["on_lost"] == "exit"
    reason = lost["payload"]["reason"]
    assert reason, lost["payload"]
    assert set(lost["payload"]) == {"key", "token", "holder", "reason", "on_lost"}
    state, _ = run_states(record["run"])
    assert state is not None and state.is_crashed(), state
    assert reason in (state.message or ""), (reason, state.message)
    fired = automation_events(prefect_api, automation.id)
    triggered = [e for e in fired if e["event"] == "prefect.automation.triggered"]
    assert [e["payload"]["triggering_event"]["id"] for e in triggered] == [lost["id"]], fired

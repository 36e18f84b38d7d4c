"""``leasectl list / show / history``: the real script's tables and JSON,
against leases the test creates in a real store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from cli_helpers import Leasectl, poll, table_rows

from lease_integrations import LeaseLock, LeaseStore, connect

AIRFLOW_META = {"dag_id": "billing", "task_id": "charge", "run_id": "manual__1", "try_number": 2}
PREFECT_META = {"flow_name": "daily-report", "flow_run_id": "6f1c-run"}
GHOST = "ghost-host:4242:0123456789abcdef"


@pytest.fixture
def store(cli_url: str) -> Iterator[LeaseStore]:
    s = connect(cli_url)
    yield s
    s.close()


def test_list_shows_held_expired_and_released_leases(
    store: LeaseStore, cli_url: str, key: str, leasectl: Leasectl
) -> None:
    lock = LeaseLock(store, f"{key}/held", ttl=30.0, on_lost="check", meta=AIRFLOW_META)
    lease = lock.acquire()
    try:
        done = LeaseLock(store, f"{key}/done", ttl=30.0, meta=PREFECT_META)
        done.release(done.acquire())
        assert store.acquire(f"{key}/stale", GHOST, GHOST, 0.5, {"host": "ghost-host"}).granted
        poll(lambda: store.get(f"{key}/stale").state == "expired", 10, "the stale lease to expire")  # type: ignore[union-attr]
        assert store.acquire(f"{key}-elsewhere", GHOST, GHOST, 30, {}).granted  # outside the prefix

        text = leasectl("--url", cli_url, "list", f"{key}/")
        assert text.code == 0, text.err
        assert text.out.splitlines()[0].startswith(f"3 lease(s) with prefix '{key}/' in ")
        rows = {r["KEY"]: r for r in table_rows(text.out, "KEY")}
        assert sorted(rows) == [f"{key}/done", f"{key}/held", f"{key}/stale"]
        held = rows[f"{key}/held"]
        assert (held["STATE"], held["HOLDER"], held["TOKEN"]) == ("held", lease.holder,
                                                                 str(lease.token))
        assert held["META"] == "dag=billing task=charge run=manual__1 try=2"
        assert held["EXPIRES IN"].endswith("s") and not held["EXPIRES IN"].startswith("expired")
        assert (rows[f"{key}/done"]["STATE"], rows[f"{key}/done"]["HOLDER"]) == ("released", "-")
        stale = rows[f"{key}/stale"]
        assert (stale["STATE"], stale["HOLDER"]) == ("expired", GHOST)
        assert stale["EXPIRES IN"].startswith("expired ") and stale["EXPIRES IN"].endswith(" ago")

        as_json = leasectl("list", f"{key}/", "--json", "--url", cli_url)
        assert as_json.code == 0, as_json.err
        leases = {item["key"]: item for item in json.loads(as_json.out)["leases"]}
        assert sorted(leases) == sorted(rows)
        h = leases[f"{key}/held"]
        assert (h["state"], h["holder"], h["token"]) == ("held", lease.holder, lease.token)
        assert {k: h["meta"][k] for k in AIRFLOW_META} == AIRFLOW_META
        assert h["expires_in_s"] > 0 and h["held_for_s"] >= 0
        assert leases[f"{key}/stale"]["expires_in_s"] <= 0
        assert leases[f"{key}/done"]["holder"] is None
        assert leases[f"{key}/done"]["meta"]["flow_run_id"] == "6f1c-run"
    finally:
        lock.release(lease)


def test_list_of_an_empty_prefix_is_ok(cli_url: str, store: LeaseStore, key: str,
                                       leasectl: Leasectl) -> None:
    result = leasectl("--url", cli_url, "list", f"{key}/nothing-here/")
    assert result.code == 0, result.err
    assert result.out.startswith("no leases with prefix")
    assert json.loads(leasectl("--url", cli_url, "--json", "list", f"{key}/n/").out)["leases"] == []


def test_show_prints_one_lease_in_full(store: LeaseStore, cli_url: str, key: str,
                                       leasectl: Leasectl) -> None:
    lock = LeaseLock(store, key, ttl=30.0, on_lost="check", meta=PREFECT_META)
    lease = lock.acquire()
    try:
        result = leasectl("--url", cli_url, "show", key)
        assert result.code == 0, result.err
        fields = dict(line.split(":", 1) for line in result.out.splitlines()
                      if not line.startswith(" ") and line.count(":") and not line.endswith(":"))
        assert fields["state"].strip() == "held"
        assert fields["holder"].strip() == lease.holder
        assert fields["token"].strip() == str(lease.token)
        assert "  flow_run_id = 6f1c-run" in result.out.splitlines()
        assert "+ granted to " in result.out and "(flow=daily-report flow_run=6f1c-run)" in result.out

        data = json.loads(leasectl("--url", cli_url, "show", key, "--json").out)
        assert (data["lease"]["state"], data["lease"]["token"]) == ("held", lease.token)
        assert [e["kind"] for e in data["recent_events"]] == ["acquired"]
    finally:
        lock.release(lease)
    after = json.loads(leasectl("--url", cli_url, "show", key, "--json").out)
    assert after["lease"]["state"] == "released"
    assert [e["kind"] for e in after["recent_events"]] == ["acquired", "released"]


def test_show_and_history_of_an_unknown_key_exit_1(store: LeaseStore, cli_url: str, key: str,
                                                   leasectl: Leasectl) -> None:
    for command in ("show", "history"):
        for extra in ((), ("--json",)):
            result = leasectl("--url", cli_url, command, key, *extra)
            assert result.code == 1, (command, extra, result)
            assert f"no lease {key!r}" in result.err
            assert result.out == ""


def test_history_lists_grants_releases_and_breaks(store: LeaseStore, cli_url: str, key: str,
                                                  leasectl: Leasectl) -> None:
    alice, bob = "alice-host:11:00000000000000aa", "bob-host:22:00000000000000bb"
    first = store.acquire(key, alice, alice, 30, AIRFLOW_META).record
    assert first is not None and store.release(key, alice, first.token)
    second = store.acquire(key, bob, bob, 30, PREFECT_META).record
    assert second is not None
    t1, t2 = first.token, second.token
    broke = leasectl("--url", cli_url, "break", key, "--yes", "--by", "night-ops")
    assert broke.code == 0, broke.err

    result = leasectl("--url", cli_url, "history", key)
    assert result.code == 0, result.err
    rows = table_rows(result.out, "AT (UTC)")
    assert [(r["EVENT"], r["TOKEN"], r["HOLDER"]) for r in rows] == [
        ("acquired", str(t1), alice), ("released", str(t1), alice),
        ("acquired", str(t2), bob), ("broken", str(t2), bob)]
    assert rows[0]["DETAIL"] == "dag=billing task=charge run=manual__1 try=2"
    assert rows[3]["DETAIL"] == "by=night-ops"
    timeline = result.out.split("timeline:\n", 1)[1].splitlines()
    events = [line.split(None, 1)[1] for line in timeline if not line.strip().startswith("--")
              and not line.startswith("now:")]
    assert re.match(rf"#{t1} +\+ granted to alice-host:11 \(dag=billing", events[0])
    assert re.match(rf"#{t1} +- released by alice-host:11, held ", events[1])
    assert re.match(rf"#{t2} +\+ granted to bob-host:22 \(flow=daily-report", events[2])
    assert re.match(rf"#{t2} +! BROKEN by night-ops \(holder bob-host:22, held ", events[3])
    assert result.out.rstrip().endswith(f"now: released (last token {t2})")

    data = json.loads(leasectl("--url", cli_url, "history", key, "--json").out)
    assert [(e["kind"], e["token"]) for e in data["events"]] == [
        ("acquired", t1), ("released", t1), ("acquired", t2), ("broken", t2)]
    assert data["events"][3]["detail"]["by"] == "night-ops"
    assert data["current"]["holder"] is None and data["current"]["token"] == t2

    last_two = json.loads(leasectl("--url", cli_url, "history", key, "-n", "2", "--json").out)
    assert [e["kind"] for e in last_two["events"]] == ["acquired", "broken"]


def test_history_shows_an_expiry_takeover(store: LeaseStore, cli_url: str, key: str,
                                          leasectl: Leasectl) -> None:
    """A holder that crashed (never released) and was taken over after its
    ttl: the history says so, in the table, the timeline and the JSON."""
    ghost, bob = GHOST, "bob-host:22:00000000000000bb"
    first = store.acquire(key, ghost, ghost, 0.5, AIRFLOW_META).record
    assert first is not None
    poll(lambda: store.get(key).state == "expired", 10, "the crashed holder's lease to expire")  # type: ignore[union-attr]
    second = store.acquire(key, bob, bob, 30, PREFECT_META).record
    assert second is not None
    t1, t2 = first.token, second.token

    result = leasectl("--url", cli_url, "history", key)
    assert result.code == 0, result.err
    rows = table_rows(result.out, "AT (UTC)")
    assert [(r["EVENT"], r["TOKEN"], r["HOLDER"]) for r in rows] == [
        ("acquired", str(t1), ghost), ("acquired", str(t2), bob)]
    assert rows[1]["DETAIL"].startswith(
        f"took over #{t1} of {ghost} (expired, never released); flow=daily-report")
    timeline = result.out.split("timeline:\n", 1)[1].splitlines()
    events = [line.split(None, 1)[1] for line in timeline if not line.strip().startswith("--")
              and not line.startswith("now:")]
    assert len(events) == 3, events
    assert re.match(rf"#{t1} +\+ granted to ghost-host:4242 \(", events[0])
    # Not "held N s": the holder may have died at any moment before the takeover.
    assert re.match(rf"#{t1} +~ EXPIRED: ghost-host:4242 never released; [0-9.]+s from its "
                    rf"grant until taken over by #{t2}$", events[1]), events[1]
    assert re.match(rf"#{t2} +\+ granted to bob-host:22 \(flow=daily-report", events[2])

    data = json.loads(leasectl("--url", cli_url, "history", key, "--json").out)
    assert data["events"][1]["detail"]["took_over"] == {"token": t1, "holder": ghost}

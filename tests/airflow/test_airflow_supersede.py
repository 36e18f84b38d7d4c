"""``on_busy="supersede"`` under ``dag.test()`` (issue 42): a newer run
replaces the holder, and the old one can no longer write.

``sup_op`` holds ``sup/rows`` and writes a fenced row every 20 ms; a newer
``sup_deco`` run supersedes it. Asked: the old process (and with it every
write it could make) is gone before the new body runs, no old write is
accepted after the new holder's first, the new token is higher, on_kill ran
before the new body, and the old try is FAILED, once (not up for retry),
its log naming the run that replaced it. Then ``only_newer("logical_date")``
refuses an older (backfill) run: it fails as a busy ``fail`` does, and the
holder works on untouched. Each prints the time from the superseding run's
start (its process, and the break) to its body.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import wait_until
from supersede_dags.supersede_dags import KEY
from supersede_runs import DagTest, events, rows, try_states

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect

# Each test its own dates: Airflow 2.11's dag.test() deletes an earlier run of
# the same date first, which fails there (its DagRun note needs the FAB models).
OLD, NEW = "2026-06-02T00:00:00+00:00", "2026-06-03T00:00:00+00:00"
HELD, BACKFILL = "2026-07-02T00:00:00+00:00", "2026-07-01T00:00:00+00:00"
WAIT = 240.0


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "records"
    directory.mkdir()
    monkeypatch.setenv("LEASE_STORE_URL", f"sqlite://{tmp_path}/leases.db")
    return directory


def _holder(records: Path, airflow_home: Path, tmp_path: Path,
            date: str) -> tuple[DagTest, dict]:
    old = DagTest("sup_op", date, records, airflow_home, tmp_path / "old.log")

    def working() -> dict | None:
        assert old.process.poll() is None, old.output()[-3000:]
        body = events(records, "body", dag_id="sup_op")
        return body[0] if body and rows(records) else None

    return old, wait_until(working, "the holder to write", WAIT)


@pytest.mark.timeout(600)
def test_a_newer_run_supersedes_the_holder_which_fails_naming_it(
        airflow_home: Path, records: Path, tmp_path: Path) -> None:
    old, held = _holder(records, airflow_home, tmp_path, OLD)
    new = None
    try:
        started = time.time()
        new = DagTest("sup_deco", NEW, records, airflow_home, tmp_path / "new.log")
        old_gone = old.ended(WAIT)
        assert new.process.wait(WAIT) == 0, new.output()[-3000:]
        result = new.result()
        assert result is not None and result["state"] == "success", new.output()[-3000:]
        body = events(records, "body", dag_id="sup_deco")[0]

        # The old process ended as a lost lease does, before the new body ran.
        assert old.process.wait(WAIT) == LEASE_LOST_EXIT_STATUS, old.output()[-3000:]
        # The body saw the old process gone (a zombie at most) when it began.
        assert body["replaced_pid"] == old.process.pid, body
        assert body["replaced_running"] is False, body
        assert body["token"] > held["token"]
        on_kill = events(records, "on_kill")
        assert on_kill and on_kill[0]["t"] < body["t"]

        # Fenced writes: none of the old holder's after the new holder's first,
        # and none at all once the new body ran.
        written = rows(records)
        first_new = next(i for i, r in enumerate(written) if r[0] == body["token"])
        assert all(r[0] == body["token"] for r in written[first_new:]), written[first_new:]
        assert all(r[2] < body["t"] for r in written if r[0] == held["token"])

        # The old try: FAILED once, naming the run that replaced it.
        states = try_states(airflow_home, "sup_op", "write")
        assert [(s, n) for r, s, n in states if r == held["run_id"]] == [("failed", 1)], states
        log = old.output()
        assert "this try was superseded" in log, log[-3000:]
        assert f"run {result['run_id']} of DAG sup_deco" in log, log[-3000:]

        with connect(f"sqlite://{tmp_path}/leases.db") as store:
            history = store.history(KEY, limit=50)
        broken = next(e for e in history if e.kind == "broken" and e.token == held["token"])
        superseded = next(e for e in history if e.kind == "superseded")
        assert superseded.detail["meta"]["logical_date"].startswith("2026-06-03")
        late = [r for r in written if r[0] == held["token"] and r[2] > broken.at.timestamp()]
        print(f"\ndag.test() supersede: superseding process start -> body "
              f"{body['t'] - started:.3f} s; break -> body {body['t'] - broken.at.timestamp():.3f} s;"
              f" old process gone {body['t'] - old_gone:.3f} s before the body; old writes "
              f"accepted between the break and its end: {len(late)}")
    finally:
        old.stop()
        if new is not None:
            new.stop()


@pytest.mark.timeout(600)
def test_only_newer_refuses_a_backfill_which_then_fails_as_busy(
        airflow_home: Path, records: Path, tmp_path: Path) -> None:
    old, held = _holder(records, airflow_home, tmp_path, HELD)
    backfill = None
    try:
        backfill = DagTest("sup_deco", BACKFILL, records, airflow_home, tmp_path / "backfill.log")
        assert backfill.process.wait(WAIT) == 0, backfill.output()[-3000:]
        result = backfill.result()
        assert result is not None and result["state"] == "failed", backfill.output()[-3000:]
        assert "not superseded" in backfill.output()
        assert "only_newer('logical_date') refused" in backfill.output()
        assert not events(records, "body", dag_id="sup_deco")
        assert old.process.poll() is None, old.output()[-3000:]
        with connect(f"sqlite://{tmp_path}/leases.db") as store:
            record = store.get(KEY)
            assert record is not None and record.token == held["token"]
            assert not [e for e in store.history(KEY, limit=50) if e.kind == "broken"]
        (records / "done").touch()
        assert old.process.wait(WAIT) == 0, old.output()[-3000:]
        assert (old.result() or {}).get("state") == "success", old.output()[-3000:]
        assert not events(records, "rejected")
    finally:
        old.stop()
        if backfill is not None:
            backfill.stop()

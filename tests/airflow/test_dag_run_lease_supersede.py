"""``dag_run_lease(on_busy="supersede")`` under ``dag.test()`` (issue 42):
a newer run of ``sup_run`` replaces the run whose guarded task holds the
run's lease and writes fenced rows. Asked: the old run's process had ended
before the new run's work began, no old write after the new run's first,
a higher token, and the old work try FAILED once, naming the new run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import wait_until
from supersede_runs import DagTest, events, rows, try_states

from lease_integrations import LEASE_LOST_EXIT_STATUS

OLD, NEW = "2026-06-02T00:00:00+00:00", "2026-06-03T00:00:00+00:00"
WAIT = 240.0


@pytest.mark.timeout(600)
def test_a_newer_run_supersedes_the_run_holding_the_dag_run_lease(
        airflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "records"
    records.mkdir()
    monkeypatch.setenv("LEASE_STORE_URL", f"sqlite://{tmp_path}/leases.db")
    old = DagTest("sup_run", OLD, records, airflow_home, tmp_path / "old.log")
    new = None
    try:
        def working() -> dict | None:
            assert old.process.poll() is None, old.output()[-3000:]
            body = events(records, "body", dag_id="sup_run")
            return body[0] if body and rows(records) else None

        held = wait_until(working, "the old run to write", WAIT)
        started = time.time()
        new = DagTest("sup_run", NEW, records, airflow_home, tmp_path / "new.log")
        body = wait_until(lambda: next((e for e in events(records, "body", dag_id="sup_run")
                                        if e["run_id"] != held["run_id"]), None),
                          "the new run's work", WAIT)
        old_gone = old.ended(WAIT)
        (records / "done").touch()
        assert new.process.wait(WAIT) == 0, new.output()[-3000:]
        result = new.result()
        assert result is not None and result["state"] == "success", new.output()[-3000:]
        assert old.process.wait(WAIT) == LEASE_LOST_EXIT_STATUS, old.output()[-3000:]

        assert old_gone < body["t"], (old_gone, body["t"])
        assert body["token"] > held["token"]
        written = rows(records)
        first_new = next(i for i, r in enumerate(written) if r[0] == body["token"])
        assert all(r[0] == body["token"] for r in written[first_new:]), written[first_new:]

        states = try_states(airflow_home, "sup_run", "run_work")
        assert [(s, n) for r, s, n in states if r == held["run_id"]] == [("failed", 1)], states
        log = old.output()
        assert "this try was superseded" in log, log[-3000:]
        assert f"run {result['run_id']} of DAG sup_run" in log, log[-3000:]
        print(f"\ndag.test() DAG-run lease supersede: new process start -> new work "
              f"{body['t'] - started:.3f} s; old run's process gone {body['t'] - old_gone:.3f} s "
              "before it")
    finally:
        old.stop()
        if new is not None:
            new.stop()


def test_the_run_supersede_on_a_real_store_without_airflow_running(tmp_path: Path) -> None:
    """``run_supersede.supersede_run`` alone: the old run's token broken and
    recorded as superseded by the new run, the old run's renewal refused,
    the new token higher and handed over only once the broken lease expired
    (a run's holder names no pid to watch); then ``only_newer`` refuses an
    older run and leaves the holder alone."""
    from lease_integrations import LeaseLock, connect
    from lease_integrations.airflow.run_lease import acquire_for_run, run_secret
    from lease_integrations.airflow.run_supersede import supersede_run
    from lease_integrations.core.errors import SupersedeRefused
    from lease_integrations.core.supersede_guards import only_newer

    key, ttl = "sup/run-parts", 2.0
    with connect(f"sqlite://{tmp_path}/leases.db") as store:
        old_secret = run_secret(key, "d", "old", "n1")
        old = acquire_for_run(store, key, "dagrun:d:old", old_secret, ttl,
                              {"dag_id": "d", "run_id": "old", "logical_date": OLD})
        assert old.granted and old.record is not None
        guard = only_newer("logical_date")
        started = time.monotonic()
        token = supersede_run(LeaseLock(store, key, ttl=ttl), "dagrun:d:new",
                              run_secret(key, "d", "new", "n2"),
                              {"dag_id": "d", "run_id": "new", "logical_date": NEW}, guard)
        waited = time.monotonic() - started
        assert token > old.record.token
        assert waited >= ttl * 0.8, waited  # the broken lease's expiry, less its age
        assert not store.renew(key, old_secret, old.record.token, ttl)
        record = store.get(key)
        assert record is not None and (record.token, record.holder) == (token, "dagrun:d:new")
        history = store.history(key, limit=20)
        assert [e.detail["by"] for e in history if e.kind == "broken"] == [
            "supersede by dagrun:d:new"]
        superseded = next(e for e in history if e.kind == "superseded")
        assert superseded.token == old.record.token
        assert superseded.detail["meta"]["run_id"] == "new"

        with pytest.raises(SupersedeRefused, match=r"only_newer\('logical_date'\) refused"):
            supersede_run(LeaseLock(store, key, ttl=ttl), "dagrun:d:backfill",
                          run_secret(key, "d", "backfill", "n3"),
                          {"dag_id": "d", "run_id": "backfill", "logical_date": OLD}, guard)
        after = store.get(key)
        assert after is not None and after.token == token

"""Issue 39: after a loss, the process's other leases are released only once
nothing the job started runs, in both modes: with the keeper (it releases
them once the job and its tree are gone) and in the job's own thread
(``LEASE_KEEPER=off``: the tree is frozen first, then they are released).
Judged by the job's child itself, which reads the other lease from the store
in a tight loop: it must never see it released."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lease_integrations import connect
from tests.cli.cli_helpers import poll
from tests.keeper.keeper_runs import Run, figures, wait_until_kept

TTL = 3.0


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


@pytest.mark.parametrize("mode", ["keeper", "thread"])
def test_the_other_leases_are_released_only_once_nothing_of_the_job_runs(
        url: str, key: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "thread":
        monkeypatch.setenv("LEASE_KEEPER", "off")
    stamps = tmp_path / "stamps"
    job = Run(tmp_path / "job.out", url, key, str(stamps), str(TTL),
              module="tests.keeper.release_order_job")
    try:
        token = int(job.wait_for("held")[1])
        job.seen |= job.tree()
        if mode == "keeper":
            assert wait_until_kept(job.pid, url, key, token) is not None, "the job has no keeper"
        with connect(url) as store:
            store.force_release(key, by="test")
            status = job.process.wait(30)
            poll(lambda: any(e.kind == "released" for e in store.history(f"{key}-other")),
                 3 * TTL, "the other lease's release", 0.02)
        seen = stamps.read_text().split()
    finally:
        job.end()
    figures(test="release-order", mode=mode, store=url.split(":")[0], status=status,
            reads=len(seen), saw_it_free=seen.count("free"))
    assert status in (75, -9), status
    assert "free" not in seen, "the job's child ran on after the other lease was released"

"""Keepers forked from one warm server (``keeper/forkserver.py``): several
jobs' keepers come from one server and share its pages; the server's death or
freeze costs no job its lease or its containment; a socket folder others could
open is not used. Each job is a real process holding a lease (ttl 3 s) until
told to stop; each test has a server of its own (``XDG_RUNTIME_DIR`` in a
temporary folder), ended by pid at teardown."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lease_integrations import connect
from tests.cli.cli_helpers import poll
from tests.keeper.keeper_observe import (
    Process,
    alive,
    cmdline,
    identify,
    keepers_of,
    renewed_by_the_keeper,
    stat,
    wait_gone,
    watched,
)
from tests.keeper.keeper_runs import figures

TTL = 3.0
ROOT = Path(__file__).resolve().parents[2]
HOLDER = textwrap.dedent("""
    import os, sys
    from lease_integrations import LeaseLock, connect
    url, key, stop = sys.argv[1:4]
    with LeaseLock(connect(url), key, ttl=float(sys.argv[4])).hold() as lease:
        print("held", lease.token, flush=True)
        sys.stdin.readline()  # until the test says stop (or closes our stdin)
    print("released", flush=True)
""")
#: A death pipe kills "within milliseconds"; room for a loaded machine.
DEATH_PIPE_BOUND = 2.0


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    from tests.conftest import store_url_for

    return store_url_for(request, request.param, tmp_path)


class Holder:
    def __init__(self, url: str, key: str, env: dict[str, str], out: Path) -> None:
        self.out = out
        with open(out, "wb") as f:
            self.process = subprocess.Popen(
                [sys.executable, "-c", HOLDER, url, key, "-", str(TTL)], stdout=f,
                stdin=subprocess.PIPE, cwd=ROOT, env=env, start_new_session=True)
        self.pid = self.process.pid
        poll(lambda: self._held() or self.process.poll() is not None, 60,
             "the holder's held line", 0.01)
        held = self._held()
        assert held is not None, f"the holder exited {self.process.poll()}"
        self.token = held

    def _held(self) -> int | None:
        found = re.search(r"^held (\d+)$", self.out.read_text(), re.M)
        return int(found.group(1)) if found else None

    def keeper(self) -> Process:
        return poll(lambda: next((identify(p) for p in keepers_of(self.pid)), None), 30,
                    f"a keeper of holder {self.pid}", 0.01)


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[Callable[[str, str], Holder]]:
    """``start(url, key)``: a holder whose keeper comes from this test's own
    fork server (``XDG_RUNTIME_DIR`` here). Teardown ends, by pid, the
    holders, their keepers and this test's servers."""
    runtime = Path(tempfile.mkdtemp(prefix="lk-"))  # short: a socket's path has 107 bytes
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT)}
    env.pop("LEASE_KEEPER", None)
    env.pop("LEASE_STORE_URL", None)
    started: list[Holder] = []

    def start(url: str, key: str) -> Holder:
        holder = Holder(url, key, env, tmp_path / f"holder-{len(started)}.out")
        started.append(holder)
        return holder

    start.runtime = runtime  # type: ignore[attr-defined]
    yield start
    ours = [identify(p) for h in started for p in keepers_of(h.pid)] + servers(runtime)
    for holder in started:
        if holder.process.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.process.wait()
    for process in ours:
        if process is not None and alive(process):
            os.kill(process[0], signal.SIGCONT)
            os.kill(process[0], signal.SIGKILL)
    shutil.rmtree(runtime, ignore_errors=True)


def servers(runtime: Path) -> list[Process]:
    """The fork servers listening in ``runtime``: their keepers share their
    command line (so does the launcher, until it exits), but a keeper holds
    its job's pidfd and a server none."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and f"--fork-server {runtime}/" in cmdline(int(entry.name)):
            process = identify(int(entry.name))
            # The launcher leads its own group and forks the server into it;
            # keepers lead groups of their own and hold their job's pidfd.
            if process is not None and not watched(process[0]) \
                    and group_of(process[0]) not in (process[0], None):
                found.append(process)
    return found


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def one_server(runtime: Path) -> Process:
    """The one server of ``runtime``, once it listens: it binds only when
    warm, so a job asking from then on gets a forked keeper (before, under
    load, the job's reply bound may run out and it spawns its own)."""
    return poll(lambda: (s[0] if len(s := servers(runtime)) == 1 and listening(runtime)
                         else None), 30, f"one fork server listening in {runtime}", 0.01)


def listening(runtime: Path) -> bool:
    """A socket bound under ``runtime`` accepts connections (``/proc/net/unix``
    flag ``__SO_ACCEPTCON``): a dead server's socket file is not listed."""
    with open("/proc/net/unix") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return any(len(row) == 8 and int(row[3], 16) & 0x10000 and row[7].startswith(f"{runtime}/")
               for row in rows)


def parent(process: Process) -> int:
    found = stat(process[0])
    assert found is not None, f"{process} is gone"
    return found[1]


def kept(url: str, key: str, holder: Holder) -> None:
    """The holder's lease is renewed twice more: its keeper keeps it."""
    with connect(url) as store:
        renewed_by_the_keeper(store, key, holder.token)
        renewed_by_the_keeper(store, key, holder.token)


def test_the_keepers_of_several_jobs_are_forked_from_one_server(
        url: str, key: str, holders: Callable[[str, str], Holder]) -> None:
    """The first job starts the server; the next jobs' keepers are its
    children (not the jobs'), each keeps its own job's lease, and killing
    one of them kills its job through the death pipe, as a spawned keeper's
    death does."""
    first = holders(url, f"{key}-0")
    server = one_server(holders.runtime)  # type: ignore[attr-defined]
    later = [holders(url, f"{key}-{n}") for n in (1, 2, 3)]
    keepers = [h.keeper() for h in later]
    assert {parent(k) for k in keepers} == {server[0]}, (keepers, server)
    for n, holder in enumerate([first, *later]):
        kept(url, f"{key}-{n}", holder)
    os.kill(keepers[0][0], signal.SIGKILL)
    killed_at = time.monotonic()
    gone_at = wait_gone({identify(later[0].pid) or (later[0].pid, 0)}, DEATH_PIPE_BOUND)
    assert later[0].process.wait() == -signal.SIGKILL
    figures(store=url.split(":")[0], forked_keepers=len(keepers),
            keeper_killed_to_job_gone_s=gone_at - killed_at)
    assert all(h.process.poll() is None for h in (first, *later[1:]))


def test_the_first_job_gets_its_keeper_from_the_server_it_starts(
        url: str, key: str, holders: Callable[[str, str], Holder]) -> None:
    """No server yet: the job starts one and waits for it to bind (about
    what a spawned keeper's start costs) instead of spawning its own, so a
    cold burst's keepers share pages too. Before, the first job spawned."""
    first = holders(url, f"{key}-0")
    server = one_server(holders.runtime)  # type: ignore[attr-defined]
    assert parent(first.keeper()) == server[0]
    kept(url, f"{key}-0", first)


def test_a_killed_server_costs_no_lease_and_the_next_job_gets_a_keeper(
        url: str, key: str, holders: Callable[[str, str], Holder]) -> None:
    """SIGKILL of the server: the keepers it forked run on (their jobs keep
    their leases), and a job started after it gets a keeper and a new server."""
    holders(url, f"{key}-0")
    server = one_server(holders.runtime)  # type: ignore[attr-defined]
    forked = holders(url, f"{key}-1")
    keeper = forked.keeper()
    assert parent(keeper) == server[0]
    os.kill(server[0], signal.SIGKILL)
    poll(lambda: not alive(server), 10, "the server to die", 0.01)
    kept(url, f"{key}-1", forked)
    assert alive(keeper)
    after = holders(url, f"{key}-2")
    after.keeper()
    kept(url, f"{key}-2", after)
    assert one_server(holders.runtime) != server  # type: ignore[attr-defined]


def test_a_frozen_server_keeps_no_job_waiting_for_its_keeper(
        url: str, key: str, holders: Callable[[str, str], Holder]) -> None:
    """SIGSTOP of the server: a new job waits at most the reply bound, then
    spawns its own keeper (its child), which keeps its lease."""
    holders(url, f"{key}-0")
    server = one_server(holders.runtime)  # type: ignore[attr-defined]
    os.kill(server[0], signal.SIGSTOP)
    try:
        job = holders(url, f"{key}-1")
        keeper = job.keeper()
        assert parent(keeper) == job.pid
        kept(url, f"{key}-1", job)
    finally:
        os.kill(server[0], signal.SIGCONT)


def test_a_socket_folder_others_can_open_is_not_used(
        url: str, key: str, holders: Callable[[str, str], Holder]) -> None:
    """The server's folder open to the group or others (another user could
    put a socket of theirs there): no server, each job spawns its keeper."""
    folder = holders.runtime / f"lease-keepers-{os.getuid()}"  # type: ignore[attr-defined]
    folder.mkdir(mode=0o700)
    folder.chmod(0o755)
    first = holders(url, f"{key}-0")
    second = holders(url, f"{key}-1")
    for job in (first, second):
        assert parent(job.keeper()) == job.pid
    assert list(folder.iterdir()) == []
    assert servers(holders.runtime) == []  # type: ignore[attr-defined]

"""Keepers forked from one warm server, so that they share their pages.

A keeper started by ``python -m`` pays an interpreter and the store's driver
of its own: about 17 MiB on SQLite and 32 MiB on Redis (redis-py imports its
asyncio client, its command tables and, where OpenTelemetry is installed, its
metrics), each. A host running 32 leased tasks paid 1 GiB for their keepers.
A keeper forked from a server that has already imported all that shares
those pages with every other keeper (``gc.freeze`` keeps the collector from
touching, and so copying, them), and starts in milliseconds: a burst of
holders does not start 32 interpreters at the moment the host is busiest.

One server per user, install and cgroup (the socket's name is a digest of
the interpreter, this package's files and ``/proc/self/cgroup``): keepers
forked from it live in the cgroup of the jobs that asked for them, so
stopping one systemd unit or container cannot take another's keepers (and,
through their death pipes, its jobs) with it. Its socket lives in a
directory only the user can open; each side checks the other's uid.

The first job that finds no server starts one (detached: it is no child of
the job); it and the other jobs of a burst wait up to ``BIND_WAIT`` for
that server to bind (it binds once warm: about what a spawned keeper's
start costs, which the job would wait for anyway), and a job whose server
did not bind or answer by then spawns its own keeper. The
server holds no lease and no secret (the job sends its descriptors and
plain environment; the store's URL and the owner secrets still come on the
keeper's stdin), so its death costs nothing but the next start's sharing;
it exits after ``IDLE`` seconds without a request.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from . import kernel

#: Seconds the job waits for a forked keeper before it spawns one itself.
REPLY_WAIT = 1.0
#: Seconds a job waits for a starting server to bind (it binds once warm: an
#: interpreter start and the store's driver, as a spawned keeper's start,
#: which the job would wait for instead): a loaded host takes seconds.
BIND_WAIT = 3.0
#: Seconds without a request after which the server exits.
IDLE = 120.0
#: The descriptors a request carries, in this order.
FDS = ("stdin", "stdout", "stderr", "keeper_pipe_write", "job_pipe_read", "job_pidfd", "cwd")
#: The longest socket path the kernel binds (``sun_path``, with its NUL).
_SUN_PATH_MAX = 108
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ForkedKeeper:
    """A keeper forked by the server: no child of the job, so it is watched
    through a pidfd (opened while it waits for our word, so the pid is its
    own), like ``Popen`` for the rest. ``poll`` is on every acquire's path:
    one ``select``, not a read of ``/proc``."""

    def __init__(self, process: kernel.Process) -> None:
        self.process = process
        self.pid = process[0]
        self._pidfd = kernel.Ends(pidfd=os.pidfd_open(self.pid))

    def poll(self) -> int | None:
        """None while it runs; its status is its parent's to read: -1."""
        fd = self._pidfd.get("pidfd")
        if fd < 0:  # closed behind our back (os.closerange): ask /proc
            return None if kernel.alive(self.process) else -1
        return -1 if select.select([fd], [], [], 0)[0] else None

    def wait(self) -> None:
        """Until it is gone (it closed our pipe: it is exiting); its status
        is its parent's to read."""
        while self.poll() is None:
            time.sleep(0.005)


def socket_path() -> str | None:
    """This user's, install's and cgroup's server socket, in a directory
    that only the user can open; None where there is no such directory, or
    its path is too long for a socket."""
    # Not $TMPDIR: a scheduler may give each job a temporary folder of its
    # own (and remove it), which would give each job a server of its own.
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    folder = os.path.join(base, f"lease-keepers-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return None
    digest = hashlib.sha256()
    for part in (sys.executable, sys.version, _PACKAGE, _cgroup()):
        digest.update(part.encode() + b"\0")
    here = os.path.dirname(__file__)
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):  # a changed keeper is not forked from an old server
            digest.update(f"{name}:{os.stat(os.path.join(here, name)).st_mtime_ns}".encode())
    path = os.path.join(folder, digest.hexdigest()[:24] + ".sock")
    return path if len(os.fsencode(path)) < _SUN_PATH_MAX else None


def _cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid


# -- the job's side -------------------------------------------------------------
def request(fds: dict[str, int], env: dict[str, str], scheme: str) -> ForkedKeeper | None:
    """A keeper forked for this job, holding ``fds`` (see ``FDS``); None
    when the server did not bind within ``BIND_WAIT`` or answer within
    ``REPLY_WAIT``: the caller spawns its own."""
    path = socket_path()
    if path is None:
        return None
    sock = _connect(path, scheme, env)
    if sock is None:
        return None
    try:
        if _peer_uid(sock) != os.getuid():
            return None
        body = json.dumps({"env": env, "umask": _umask(), "scheme": scheme}).encode() + b"\n"
        socket.send_fds(sock, [body], [fds[name] for name in FDS])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                return None
            reply += chunk
        process = kernel.identify(int(reply))
        if process is None:
            return None
        keeper = ForkedKeeper(process)  # its pidfd, opened while it waits for our word
        sock.sendall(b"go\n")
        return keeper
    except OSError:
        return None
    finally:
        sock.close()


def _connect(path: str, scheme: str, env: dict[str, str]) -> socket.socket | None:
    """A connection to the server, started by this job if no job is
    starting one, waited for up to ``BIND_WAIT``, so that a cold burst's
    keepers are forked too; None past that, or once the server this job
    started died before it bound (its lock is free again: it is not
    started a second time)."""
    deadline = time.monotonic() + BIND_WAIT
    started = gone = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(REPLY_WAIT)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
        except OSError:
            sock.close()
            return None
        if gone or time.monotonic() >= deadline:
            return None
        if _start_server(path, scheme, env, start=not started):
            # Ours let its lock go: bound since our connect (try once more), or dead.
            gone, started = started, True
            if gone:
                continue
        time.sleep(0.01)  # a bounded poll: the socket has no event to wait on


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


#: Launchers not yet seen to exit: reaped at the next start, never waited for.
_launchers: list[subprocess.Popen[bytes]] = []
#: Every launcher this process started: each leads the server's process group,
#: which is never the job's to end (``containment.DeathPipes.look``).
_launcher_pids: set[int] = set()


def launchers() -> set[int]:
    return set(_launcher_pids)


def _start_server(path: str, scheme: str, env: dict[str, str], *, start: bool) -> bool:
    """Start the server (if ``start``), detached (its own session; the
    launcher forks it and exits, so the server is no child of the job). A
    lock, held by the server until it binds, lets one job of a burst start
    it: True when this job took the lock, that is when no server is
    starting; every job waits for the bind (``_connect``)."""
    lock = os.open(path + ".lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return False
    _launchers[:] = [launcher for launcher in _launchers if launcher.poll() is None]
    try:
        if not start:
            return True
        _launchers.append(subprocess.Popen(
            [sys.executable, "-m", "lease_integrations.keeper.process", "--fork-server", path,
             scheme, str(lock)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, env=env, pass_fds=(lock,)))
        _launcher_pids.add(_launchers[-1].pid)
    except OSError:
        pass
    finally:
        os.close(lock)
    return True


# -- the server -----------------------------------------------------------------
def serve(path: str, scheme: str, lock: int | None, keeper: Callable[[int], None]) -> None:
    """Fork a keeper (``keeper(job_pidfd)``, the keeper's ``main``) for each
    job that asks, until ``IDLE`` seconds pass without one."""
    # Python's own recipe for sharing pages with forked children: no
    # collections here (they free objects, and the children's allocations
    # would fill those holes, copying the pages), ``gc.freeze`` before each
    # fork, and collections again in the child.
    gc.disable()
    # Warm before binding: a socket that exists is a server that answers in
    # milliseconds, not one still importing a driver while a job's
    # ``REPLY_WAIT`` runs out (jobs meanwhile find the lock held and wait).
    "warm".encode("idna")  # what opening a store imports (encodings.idna, stringprep)
    importlib.import_module("email.parser")
    warm: set[str] = set()
    _warm(scheme, warm)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a dead server's (we hold the lock)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    bound = os.stat(path).st_ino
    if lock is not None:
        os.close(lock)  # bound: the next job connects instead of starting one
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    while select.select([listener], [], [], IDLE)[0]:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        scheme = _serve_one(conn, listener, keeper)
        _warm(scheme, warm)
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == bound:
            os.unlink(path)


def _warm(scheme: str, warm: set[str]) -> None:
    """Import the store's driver here once, so the next keepers share it."""
    from ..stores import STORES
    module = STORES.get(scheme, "").split(":")[0]
    if module and module not in warm:
        warm.add(module)
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def _serve_one(conn: socket.socket, listener: socket.socket,
               keeper: Callable[[int], None]) -> str:
    fds: list[int] = []
    try:
        conn.settimeout(REPLY_WAIT)
        if _peer_uid(conn) != os.getuid():
            return ""
        body, fds, _, _ = socket.recv_fds(conn, 1 << 20, len(FDS))
        while not body.endswith(b"\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                return ""
            body += chunk
        ask = json.loads(body)
        if len(fds) != len(FDS):
            return ""
        gc.freeze()
        if os.fork() == 0:
            gc.enable()
            listener.close()
            _become_keeper(conn, dict(zip(FDS, fds)), ask, keeper)
        return str(ask.get("scheme", ""))
    except (OSError, ValueError):
        return ""
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _become_keeper(conn: socket.socket, fds: dict[str, int], ask: dict[str, Any],
                   keeper: Callable[[int], None]) -> None:
    """In the forked child: take the job's descriptors, directory, umask
    and plain environment, tell the job our pid, and run the keeper."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for target, name in enumerate(("stdin", "stdout", "stderr")):
            os.dup2(fds[name], target)
        os.fchdir(fds["cwd"])
        os.umask(int(ask["umask"]))
        os.environ.clear()
        os.environ.update(ask["env"])
        keep = {0, 1, 2, fds["keeper_pipe_write"], fds["job_pipe_read"], fds["job_pidfd"],
                conn.fileno()}
        for fd in os.listdir("/proc/self/fd"):
            if int(fd) not in keep:
                with contextlib.suppress(OSError):
                    os.close(int(fd))
        for name in ("keeper_pipe_write", "job_pipe_read", "job_pidfd"):
            os.set_inheritable(fds[name], False)
        try:
            conn.sendall(f"{os.getpid()}\n".encode())
            go = conn.recv(8)
        except OSError:
            go = b""
        if go != b"go\n":
            os._exit(0)  # the job gave up on us and spawned its own
        conn.close()
        keeper(fds["job_pidfd"])
        status = 0
    except BaseException:  # a forked child never returns to the server's loop
        with contextlib.suppress(Exception):
            import traceback
            traceback.print_exc()
    finally:
        os._exit(status)


def launched(argv: list[str], keeper: Callable[[int], None]) -> None:
    """``python -m lease_integrations.keeper.process --fork-server PATH
    SCHEME LOCK`` (``_start_server``; the keepers forked from it keep that
    command line, so ``ps`` names them keepers): fork, so the server is no
    child of the job that started it, and let the launcher exit."""
    path, scheme, lock = argv[0], argv[1], int(argv[2])
    if os.fork() != 0:
        os._exit(0)
    serve(path, scheme, lock, keeper)


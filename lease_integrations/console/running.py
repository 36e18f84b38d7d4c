"""``leasectl run``: any program under a lease, for the jobs that are not
Python callables (cron entries, ``BashOperator`` scripts, dbt, container
entrypoints).

``leasectl`` takes the lease with ``LeaseLock.hold()`` (``on_lost="exit"``,
as every face) and runs the command in a session of its own, with
``LEASE_KEY`` and ``LEASE_TOKEN`` (its fencing token) added to its
environment and nothing secret (the owner secret and the store URL stay in
``leasectl``). It waits for the command and exits with its status. SIGTERM
and SIGINT are forwarded to the command's process group; the lease is given
back once the command and its group have ended. A lost lease runs the
fail-stop ladder: the command, its descendants and its process group are
ended, then ``leasectl`` exits 75, within the margin before the store could
grant the lease again (a trust-window loss; an operator's break frees the key
at once, by design).

Exit statuses (``STATUSES``) are chosen apart from leasectl's others and from
75, so a cron mail or a wrapper script tells "skipped" from "failed": the
command's own status is passed through, and a command that itself exits
with one of these is told apart only by ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..core.clock import now
from ..core.errors import LEASE_LOST_EXIT_STATUS, ConfigurationError, LeaseBusy, LeaseLost, SupersedeRefused
from ..core.lease import Lease
from ..core.store import LeaseStore
from ..core.supersede_guards import SupersedeGuard, only_newer, only_same
from ..core.validation import validate_key, validate_meta, validate_ttl
from ..keeper.client import contain
from ..keeper.descendants import descendants
from ..keeper.failstop import stop_hook
from ..lock import LeaseLock
from . import exits
from .process_group import end_group, signal_group
from .render import escape, meta_summary

#: ``--on-busy skip`` found the key held: nothing ran.
SKIPPED = 122
#: ``--on-busy fail`` found the key held: nothing ran.
BUSY = 123
#: ``--on-busy wait`` waited ``--wait-timeout`` seconds in vain: nothing ran.
WAIT_TIMED_OUT = 124
#: The command was found but cannot be executed (as a shell says it).
CANNOT_EXECUTE = 126
#: No such command (as a shell says it).
COMMAND_NOT_FOUND = 127

#: status -> when (the table ``leasectl run --help`` and the docs print).
STATUSES: tuple[tuple[str, str], ...] = (
    ("N", "the command ran and exited with N (0 to 255)"),
    ("128+N", "the command was ended by signal N (143: SIGTERM, 130: SIGINT)"),
    (str(LEASE_LOST_EXIT_STATUS), "the lease was lost while the command ran: the command and "
                                  "its process group were ended"),
    (str(SKIPPED), "busy, --on-busy skip: nothing ran (a line names the holder)"),
    (str(BUSY), "busy, --on-busy fail: nothing ran (a line names the holder); also --on-busy "
                "supersede refused by --only-newer / --only-same"),
    (str(WAIT_TIMED_OUT), "busy, --on-busy wait: --wait-timeout passed, nothing ran"),
    (str(exits.USAGE), "bad arguments (no command, bad --meta, bad numbers): nothing ran, no "
                       "lease taken"),
    (str(exits.UNAVAILABLE), "the store could not be reached: nothing ran"),
    (str(exits.INTERNAL), "an unexpected error in leasectl (a bug: please report it)"),
    (str(CANNOT_EXECUTE), "the command cannot be executed: nothing ran, no lease taken"),
    (str(COMMAND_NOT_FOUND), "the command was not found: nothing ran, no lease taken"),
)

ON_BUSY = ("skip", "fail", "wait", "supersede")

EPILOG = "exit statuses:\n" + "\n".join(f"  {code:>5}  {text}" for code, text in STATUSES) + """

The command gets LEASE_KEY and LEASE_TOKEN (its fencing token) in its
environment, runs in a session and process group of its own, and gets
SIGTERM and SIGINT forwarded. --json prints one line on stderr at the end.
examples:
  leasectl run --key nightly-billing --ttl 60 -- /opt/jobs/billing.sh
  leasectl run --key dbt --on-busy wait --wait-timeout 600 -- dbt run
"""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` subcommand's own options (the store options are common)."""
    parser.epilog = EPILOG
    parser.set_defaults(creates_store=True)  # a SQLite file is made, as connect() makes it
    parser.add_argument("--key", required=True, type=_key, help="the lease's key")
    parser.add_argument("--ttl", type=_ttl, default=30.0, metavar="S",
                        help="seconds the store keeps the lease without a renewal (default 30)")
    parser.add_argument("--on-busy", choices=ON_BUSY, default="skip",
                        help=f"when the key is held: skip (exit {SKIPPED}), fail (exit {BUSY}), "
                             "wait, or supersede: replace the holder, which is stopped first "
                             "(default skip)")
    parser.add_argument("--wait-timeout", type=_seconds, default=None, metavar="S",
                        help="with --on-busy wait: give up after S seconds (exit "
                             f"{WAIT_TIMED_OUT}); default: wait as long as it takes")
    parser.add_argument("--meta", action="append", type=_meta_item, default=[],
                        metavar="K=V", help="a field for the lease's record (repeatable), "
                                            "shown by leasectl list/show")
    parser.add_argument("--only-newer", default=None, metavar="FIELD",
                        help="with --on-busy supersede: replace the holder only if this run's "
                             "--meta FIELD (a date, partition or number) is later than the "
                             "holder's (a backfill never displaces today's run)")
    parser.add_argument("--only-same", action="append", default=[], metavar="FIELD",
                        help="with --on-busy supersede: replace the holder only if its --meta "
                             "FIELD is the same as this run's (repeatable)")
    parser.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                        action=_CheckedPlan, help="the command to run under the lease")


def run_command(store: LeaseStore, args: argparse.Namespace) -> int:
    """Take the lease, run the command, give the lease back (everything was
    checked when the arguments were parsed: ``_CheckedPlan``)."""
    plan = getattr(args, "plan", None) or _plan(args)
    lock = LeaseLock(store, args.key, ttl=args.ttl, meta=plan.meta)
    return _Runner(lock, plan).run()


# -- checking the input: all of it before any lease is taken ---------------------
@dataclass
class _Plan:
    argv: list[str]
    wait: float | None
    on_busy: str
    meta: dict[str, Any]
    json: bool
    guard: SupersedeGuard | None = None


class _CheckedPlan(argparse.Action):
    """Checks the whole ``run`` command line as it is parsed. The command
    comes last (everything after it is its own), so every option is known by
    now: bad input fails here, before the store is even opened (an
    unreachable store must not hide a typo), let alone a lease taken."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, list(values))
        try:
            namespace.plan = _plan(namespace)
        except exits.CommandFailed as failed:
            parser.exit(failed.code, f"leasectl: {escape(str(failed))}\n")
        except ConfigurationError as exc:
            parser.error(str(exc))


def _plan(args: argparse.Namespace) -> _Plan:
    argv = list(args.command_line)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigurationError("run needs a command after '--': leasectl run --key KEY -- CMD "
                                 "[ARGS...]")
    if args.wait_timeout is not None and args.on_busy != "wait":
        raise ConfigurationError(f"--wait-timeout only applies with --on-busy wait (on-busy is "
                                 f"{args.on_busy!r})")
    guards = ([only_newer(args.only_newer)] if args.only_newer else []) + (
        [only_same(*args.only_same)] if args.only_same else [])
    if guards and args.on_busy != "supersede":
        raise ConfigurationError(f"--only-newer and --only-same only apply with --on-busy "
                                 f"supersede (on-busy is {args.on_busy!r})")
    given = {name for name, _ in args.meta}
    for name in ([args.only_newer] if args.only_newer else []) + args.only_same:
        if name not in given:
            raise ConfigurationError(f"the guard compares --meta {name}=...: give it")
    _check_executable(argv[0])
    meta: dict[str, Any] = {"command": os.path.basename(argv[0])}
    for name, value in args.meta:
        if name in meta and name != "command":
            raise ConfigurationError(f"--meta {name}=... is given twice")
        meta[name] = value
    meta = validate_meta(meta, "--meta")
    wait: float | None = 0
    if args.on_busy == "wait":
        wait = args.wait_timeout  # None: as long as it takes
    guard = None if not guards else guards[0] if len(guards) == 1 else _all_of(guards)
    return _Plan(argv, wait, args.on_busy, meta, bool(getattr(args, "json", False)), guard)


def _all_of(guards: list[SupersedeGuard]) -> SupersedeGuard:
    def guard(holder: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return all(each(holder, new) for each in guards)

    guard.__name__ = " and ".join(getattr(each, "__name__", "?") for each in guards)
    return guard


def _check_executable(program: str) -> None:
    """A command that cannot start is found out before the lease is taken,
    with the status a shell gives it."""
    if os.sep in program:
        if not os.path.exists(program):
            raise exits.CommandFailed(f"no such command: {program!r}", COMMAND_NOT_FOUND)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise exits.CommandFailed(f"command {program!r} is not executable", CANNOT_EXECUTE)
        return
    if shutil.which(program) is None:
        raise exits.CommandFailed(f"command {program!r} not found in PATH", COMMAND_NOT_FOUND)


def _key(text: str) -> str:
    try:
        return validate_key(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ttl(text: str) -> float:
    try:
        return validate_ttl(float(text), "--ttl")
    except ValueError as exc:  # float() or ConfigurationError (a ValueError)
        raise argparse.ArgumentTypeError(
            str(exc) if isinstance(exc, ConfigurationError)
            else f"must be a number of seconds, got {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _meta_item(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return name.strip(), value


# -- running ----------------------------------------------------------------------
class _Interrupted(BaseException):
    """SIGTERM or SIGINT before the command started: nothing more is done."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _Outcome:
    """What ``--json`` prints at the end."""

    key: str
    status: str
    exit: int
    token: int | None = None
    holder: str | None = None
    held_for: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        body = {"key": self.key, "token": self.token, "status": self.status, "exit": self.exit,
                "held_for": None if self.held_for is None else round(self.held_for, 3),
                "holder": self.holder, **self.extra}
        return json.dumps(body, separators=(",", ":"))


class _Runner:
    def __init__(self, lock: LeaseLock, plan: _Plan) -> None:
        self.lock = lock
        self.plan = plan
        self.child: Any = None  # the subprocess.Popen, once started
        self.pending: int | None = None  # a signal that came while the command was starting
        self.started = False  # the lease is taken: signals no longer interrupt
        self.seen: set[int] = set()  # the command's descendants when a signal came
        self._reported = threading.Lock()

    def run(self) -> int:
        with self._signals():
            try:
                return self._run()
            except _Interrupted as stop:
                outcome = _Outcome(self.lock.key, "interrupted", 128 + stop.signum)
                self._report(outcome)
                return outcome.exit

    def _run(self) -> int:
        with ExitStack() as stack:
            supersede = self.plan.on_busy == "supersede"
            try:
                lease = stack.enter_context(self.lock.hold(
                    self.plan.wait, supersede=supersede, supersede_if=self.plan.guard))
            except LeaseBusy as busy:
                return self._busy(busy)
            except LeaseLost as lost:  # superseded in turn before the command could start
                print(f"leasectl: not run: {escape(str(lost))}", file=sys.stderr)
                self._report(_Outcome(self.lock.key, "lost", LEASE_LOST_EXIT_STATUS,
                                      lost.token, extra={"reason": str(lost)}))
                return LEASE_LOST_EXIT_STATUS
            self.started = True
            granted = now()
            lease.on_lost(lambda lost: self._report(_Outcome(
                lost.key, "lost", LEASE_LOST_EXIT_STATUS, lost.token, lost.holder,
                now() - granted, {"reason": lost.lost_reason})))
            try:
                code = self._supervise(lease, stack)
                stack.close()  # the lease given back; LeaseLost if it was not ours to give
            except LeaseLost as lost:
                return self._lost_at_the_end(lease, granted, lost)
        return self._ended(lease, granted, code)

    def _ended(self, lease: Lease, granted: float, code: int) -> int:
        self._report(_Outcome(lease.key, "ran", code, lease.token, lease.holder, now() - granted))
        return code

    def _lost_at_the_end(self, lease: Lease, granted: float, lost: LeaseLost) -> int:
        print(f"leasectl: {escape(str(lost))}", file=sys.stderr)
        self._report(_Outcome(lease.key, "lost", LEASE_LOST_EXIT_STATUS, lease.token,
                              lease.holder, now() - granted, {"reason": str(lost)}))
        return LEASE_LOST_EXIT_STATUS

    def _supervise(self, lease: Lease, stack: ExitStack) -> int:
        """Start the command, wait for it, end what is left of its group; the
        lease is given back when ``stack`` closes (its ``LeaseLost`` then
        reaches ``_run``)."""
        import subprocess

        env = dict(os.environ, LEASE_KEY=lease.key, LEASE_TOKEN=str(lease.token))
        try:
            self.child = child = subprocess.Popen(self.plan.argv, env=env, start_new_session=True)
        except OSError as exc:  # it was there a moment ago: gone or changed since
            code = COMMAND_NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_EXECUTE
            print(f"leasectl: cannot run {self.plan.argv[0]!r}: {exc.strerror}", file=sys.stderr)
            return code
        # The command's group is not ours: the death pipes kill it too if
        # the keeper (or this process) dies while it runs under the lease.
        stack.enter_context(contain(self.lock.store, child.pid))
        if self.pending is not None:
            signal_group(child.pid, self.pending)
        stack.enter_context(stop_hook(lambda: end_group(child.pid, lease.grace)))
        returncode = child.wait()
        if lease.lost:
            threading.Event().wait()  # the fail-stop ladder is ending this process (75)
        # What the command left behind: its group, and what was seen below it
        # when a signal was forwarded (a child in a session of its own).
        end_group(child.pid, self.lock.grace, also=self.seen)
        return returncode if returncode >= 0 else 128 - returncode

    def _busy(self, busy: LeaseBusy) -> int:
        status, code = {"skip": ("skipped", SKIPPED), "fail": ("busy", BUSY),
                        "wait": ("timed_out", WAIT_TIMED_OUT),
                        "supersede": ("refused", BUSY)}[self.plan.on_busy]
        about = meta_summary(busy.meta)
        holder = escape(busy.holder or "?") + (f" ({escape(about)})" if about else "")
        what = {"skipped": "skipped", "busy": "not run", "refused": "not run",
                "timed_out": "not run: --wait-timeout passed"}[status]
        refused = f"; not superseded: {escape(busy.reason)}" \
            if isinstance(busy, SupersedeRefused) else ""
        print(f"leasectl: {what}: lease {self.lock.key!r} is held by {holder} with token "
              f"{busy.token}{refused}", file=sys.stderr)
        self._report(_Outcome(self.lock.key, status, code, extra={
            "held_by": busy.holder, "held_token": busy.token}))
        return code

    def _report(self, outcome: _Outcome) -> None:
        """The ``--json`` line: once, whichever path ends the run."""
        if self.plan.json and self._reported.acquire(blocking=False):
            print(outcome.line(), file=sys.stderr, flush=True)

    # -- signals: interrupt the wait for the lease; forwarded once the lease is taken
    @contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before: Mapping[int, Any] = {s: signal.getsignal(s) for s in (signal.SIGTERM,
                                                                        signal.SIGINT)}
        for signum in before:
            signal.signal(signum, self._on_signal)
        try:
            yield
        finally:
            for signum, handler in before.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        child = self.child
        if child is not None:
            self.seen |= descendants(child.pid)  # before they are orphaned by its end
            signal_group(child.pid, signum)
        elif self.started:
            self.pending = signum  # the command is starting: it gets the signal then
        else:
            raise _Interrupted(signum)

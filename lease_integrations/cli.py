"""``leasectl``: the operator's console for lease stores.

At 3 a.m. someone must answer "who holds the billing lease, since when, and is
it alive?" without reading code::

    leasectl [--url URL] list [PREFIX]        every lease: holder, token, held for, expiry
    leasectl [--url URL] show KEY             one lease in full, with its recent events
    leasectl [--url URL] history KEY [-n N]   grants, releases, breaks, losses + a timeline
    leasectl [--url URL] break KEY --yes [--by NAME] [--token N]
                                              force-release (recorded with NAME); with
                                              --token, only if it still carries token N
    leasectl [--url URL] check KEY [--ttl S] [--drift S] [--writes FILE]
                                              judge the key's history with the public
                                              checker (lease_integrations.core.checker)
    leasectl [--url URL] probe                check that an object store (s3://) refuses a
                                              stale If-Match and a second If-None-Match: *
    leasectl [--url URL] run --key KEY [...] -- CMD [ARGS...]
                                              run CMD under the lease (console/running.py)

Each command takes ``--json`` for scripts. The store is ``--url``; else, with
``--airflow-conn CONN_ID`` (Airflow installed), the store the Airflow tasks
use: that Connection (theirs is ``lease_default`` unless set otherwise); else,
with ``--prefect-block NAME`` (Prefect installed), the URL kept in that
``LeaseStoreBlock``; else ``$LEASE_STORE_URL``; else the embedded SQLite
default (as ``connect()``).
URLs are always printed with their password masked.

Exit codes:
    0  ok (also: an empty list, or ``break`` of a lease that is not held)
    1  not found: show / history / break of a key the store has never seen
    2  usage or configuration error (bad arguments, bad URL, bad key)
    3  store unavailable (unreachable, failing, or no SQLite file at that path)
    4  break refused: ``--yes`` was not given, or ``--token N`` names a lease
       that another holder has replaced since
    5  unexpected internal error (a bug: please report it)
    6  the key's stored record cannot be parsed (show / history / break); what
       can be read is still printed. ``list`` shows such keys as UNREADABLE
       beside the others and still exits 0.
    7  ``check`` found a violation in the key's history (the report names it)
    8  ``probe`` found a condition the object store ignores (the message names it)
  141  stdout was closed before the output ended (``leasectl list | head -1``):
       nothing on stderr, as any Unix tool that SIGPIPE ends (128 + 13)

Output is safe to read on a terminal: every printed field has its control
characters escaped (``\n``, ``\x1b``), and ``--json`` is strict JSON.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .console.render import escape
from .core.config import mask_url, resolve_url
from .core.errors import ConfigurationError, CorruptRecord, LeaseError, StoreUnavailable
from .core.redact import redact, remember, url_secrets
from .core.store import HISTORY_LIMIT, LeaseStore
from .core.validation import validate_key

Command = Callable[[LeaseStore, argparse.Namespace], int]

#: The Connection id Airflow tasks use unless told otherwise (airflow/connections.py),
#: repeated here so ``--help`` does not have to import Airflow.
AIRFLOW_DEFAULT_CONN = "lease_default"

EPILOG = """\
store URL: --url, else the Airflow Connection named by --airflow-conn, else
the Prefect LeaseStoreBlock named by --prefect-block, else $LEASE_STORE_URL,
else the embedded SQLite default.

exit codes:
  0  ok (also an empty list, or break of a lease that is not held)
  1  not found: show/history/break of a key the store has never seen
  2  usage or configuration error
  3  store unavailable (or no SQLite file at that path)
  4  break refused: --yes was not given, or --token N names a lease another
     holder has replaced since
  5  unexpected internal error
  6  the key's record cannot be parsed (show/history/break; list shows such
     keys as UNREADABLE and exits 0)
  7  check found a violation in the key's history
  8  probe found a condition the object store ignores
"""


#: A URL inside an argument (``redis://…``, also glued: ``--store=redis://…``).
_URL_IN_ARGUMENT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S*")


@contextmanager
def mask_url_arguments(argv: Sequence[str]) -> Iterator[None]:
    """Remember the secrets of every URL in the arguments, whatever their
    position, so every message masks them: argparse quotes an argument it
    cannot place (``leasectl URL list``, ``leasectl --ulr URL list``),
    ``list URL`` echoes its prefix on stdout. ``_Parser`` and ``_error``
    print only through ``redact``, and while an argument that held a secret
    is in use stdout goes through it too (restored afterwards: ``main`` is
    also called in process)."""
    held = False
    for argument in argv:
        for found in _URL_IN_ARGUMENT.finditer(str(argument)):
            remember(found.group(0))
            held = held or bool(url_secrets(found.group(0)))
    original = sys.stdout
    if held:
        sys.stdout = _Redacting(original)
    try:
        yield
    finally:
        sys.stdout = original


class _Redacting:
    """A text stream whose writes go through ``redact``; the rest is the stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Parser(argparse.ArgumentParser):
    """argparse, whose every message (usage errors, help) goes out through
    ``redact``; its subcommand parsers are of the same class."""

    def _print_message(self, message: str, file: Any = None) -> None:
        super()._print_message(redact(message), file)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= HISTORY_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {HISTORY_LIMIT} (the history kept per key), got {value}")
    return value


def _token(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"tokens start at 1, got {value}")
    return value


def _key(text: str) -> str:
    try:
        return validate_key(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    from .console.breaking import run_break
    from .console.checking import run_check
    from .console.history import run_history
    from .console.leases import run_list, run_show
    from .console.running import add_run_arguments, run_command

    # Accepted before or after the command; SUPPRESS keeps the command's parser
    # from overwriting a value given before it.
    common = _Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="store URL (default: $LEASE_STORE_URL, else the embedded SQLite file)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON for scripts instead of tables")
    common.add_argument("--airflow-conn", default=argparse.SUPPRESS, metavar="CONN_ID",
                        help="use the store of this Airflow Connection, as the Airflow tasks "
                             f"do (theirs is {AIRFLOW_DEFAULT_CONN!r} unless set otherwise)")
    common.add_argument("--prefect-block", default=argparse.SUPPRESS, metavar="NAME",
                        help="use the store of this Prefect LeaseStoreBlock (store='block:NAME')")

    parser = _Parser(
        prog="leasectl", description="Inspect and break lease_integrations leases.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None,
                        help="store URL (default: $LEASE_STORE_URL, else the embedded SQLite file)")
    parser.add_argument("--json", action="store_true", default=False,
                        help="print JSON for scripts instead of tables")
    parser.add_argument("--airflow-conn", default=None, metavar="CONN_ID",
                        help="use the store of this Airflow Connection, as the Airflow tasks "
                             f"do (theirs is {AIRFLOW_DEFAULT_CONN!r} unless set otherwise)")
    parser.add_argument("--prefect-block", default=None, metavar="NAME",
                        help="use the store of this Prefect LeaseStoreBlock (store='block:NAME')")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, parents=[common], help=help_text, description=help_text, epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.set_defaults(run=run)
        return sub

    listing = add("list", run_list, "list leases: holder, token, held for, expiry, state, job")
    listing.add_argument("prefix", nargs="?", default="", help="only keys starting with this")
    add("show", run_show, "show one lease in full").add_argument("key", type=_key)
    history = add("history", run_history, "recent grants, releases, breaks and losses of a key")
    history.add_argument("key", type=_key)
    history.add_argument("-n", type=_positive, default=20, metavar="N",
                         help="how many events (default 20)")
    breaking = add("break", run_break,
                   "force-release a lease whoever holds it (recorded in its history)")
    breaking.add_argument("key", type=_key)
    breaking.add_argument("--yes", action="store_true",
                          help="really break it (without this, exit 4 and change nothing)")
    breaking.add_argument("--by", default=None,
                          help="who breaks it, for the history (default: user@host)")
    breaking.add_argument("--token", type=_token, default=None, metavar="N",
                          help="break only if the lease still carries token N (what you "
                               "looked at); a run that took the key since is left alone (exit 4)")
    checking = add("check", run_check,
                   "judge a key's history: tokens unique and rising, no early grant, no "
                   "accepted stale write (exit 7 on a violation)")
    checking.add_argument("key", type=_key)
    checking.add_argument("--ttl", type=_seconds, default=None, metavar="S",
                          help="the shortest ttl the key is taken with: judges early grants")
    checking.add_argument("--drift", type=_seconds, default=0.05, metavar="S",
                          help="clock disagreement allowed, seconds (default 0.05)")
    checking.add_argument("--writes", default=None, metavar="FILE",
                          help="your fenced writes, JSON lines: {\"token\": N, \"accepted\": "
                               "true, \"at\": ISO-8601 or seconds (optional)}")
    add("probe", _no_store, "check that an object store (s3://) refuses a stale If-Match and a "
        "second If-None-Match: * (exit 8 naming a condition it ignores)")
    add_run_arguments(add("run", run_command, "run a command under the lease: its own process "
                          "group, LEASE_KEY and LEASE_TOKEN in its environment, exit 75 on loss"))
    return parser


def _no_store(store: LeaseStore, args: argparse.Namespace) -> int:  # pragma: no cover
    raise AssertionError("probe opens no store: main() runs console.probe before connecting")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _version() -> str:
    from . import __version__

    return f"leasectl (lease_integrations) {__version__}"


def _missing_sqlite_file(url: str) -> Path | None:
    """The SQLite store creates its file on first use; the console must not,
    or a typo in --url would show an empty store instead of an error."""
    if url.partition("://")[0].lower() != "sqlite":  # (multi-host URLs have no single port)
        return None
    from .stores.sqlite import path_from_url

    path = path_from_url(url)
    return None if path.exists() else path


def airflow_connection_url(conn_id: str) -> str:
    """The store URL of an Airflow Connection, found wherever Airflow keeps it
    (``airflow.connections.console_store_url``). A Connection that is not
    there is an error naming the id, ``lease_default`` too: the tasks would then
    fall back to $LEASE_STORE_URL or the embedded store, which leasectl cannot
    see from here, and showing some other store as theirs would mislead."""
    if not conn_id.strip():
        raise ConfigurationError(f"--airflow-conn needs a connection id, got {conn_id!r}")
    try:
        with _without_airflow_deprecations():
            from .airflow import _compat  # noqa: F401  (imports Airflow)
    except ImportError as exc:
        raise ConfigurationError(
            f"--airflow-conn {conn_id!r} needs Airflow installed in this environment "
            f"(from the checkout: pip install -e '<checkout>[airflow]'): {exc}") from None
    from .airflow.connections import NoSuchConnection, console_store_url

    try:
        with _without_airflow_deprecations():
            return console_store_url(conn_id)
    except NoSuchConnection as missing:
        where = ", ".join(missing.searched) or "no secrets backend"
        failed = f"; {'; '.join(missing.failures)}" if missing.failures else ""
        fallback = (" (the tasks then use $LEASE_STORE_URL or the embedded store: give that "
                    "store with --url)" if conn_id == AIRFLOW_DEFAULT_CONN else "")
        raise ConfigurationError(
            f"--airflow-conn {conn_id!r}: no such Airflow connection{fallback}; looked in "
            f"{where} (AIRFLOW_HOME={os.environ.get('AIRFLOW_HOME', '~/airflow')}){failed}. "
            "Check the id and AIRFLOW_HOME, or give the store with --url") from None


@contextmanager
def _without_airflow_deprecations() -> Iterator[None]:
    """Airflow's deprecation warnings about its own settings (2.11: "Timer and
    timing metrics publish in seconds were deprecated", twice) are not the
    console's business and were printed on every ``--airflow-conn`` call.
    Airflow adds filters that show them unless ``sys.warnoptions`` is set, so
    that is set too, for the import only."""
    sys.warnoptions.append("ignore::DeprecationWarning")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            yield
    finally:
        sys.warnoptions.remove("ignore::DeprecationWarning")


def prefect_block_url(name: str) -> str:
    """The store URL (password included) kept in a Prefect ``LeaseStoreBlock``,
    loaded from the Prefect API the flows use (``PREFECT_API_URL``)."""
    if not name.strip():
        raise ConfigurationError(f"--prefect-block needs a block name, got {name!r}")
    try:
        from .prefect.block import LeaseStoreBlock
    except ImportError as exc:
        raise ConfigurationError(
            f"--prefect-block {name!r} needs Prefect installed in this environment "
            f"(from the checkout: pip install -e '<checkout>[prefect]'): {exc}") from None
    try:
        block = LeaseStoreBlock.load(name)
    except ValueError as exc:  # Prefect's "unable to find block document"
        raise ConfigurationError(f"no Prefect LeaseStoreBlock named {name!r}: {exc}") from None
    url: str = block.get_url()
    return url


def open_store(url: str | None, airflow_conn: str | None = None,
               prefect_block: str | None = None, *, create: bool = False) -> LeaseStore:
    from .stores import connect, naming_the_variable

    given = [flag for flag, value in (("--url", url), ("--airflow-conn", airflow_conn),
                                      ("--prefect-block", prefect_block)) if value is not None]
    if len(given) > 1:
        raise ConfigurationError(f"give only one of {', '.join(given)}")
    if airflow_conn is not None:
        url = airflow_connection_url(airflow_conn)
    if prefect_block is not None:
        url = prefect_block_url(prefect_block)
    with naming_the_variable(url):
        resolved = resolve_url(url)
        missing = None if create else _missing_sqlite_file(resolved)
        if missing is not None:
            raise StoreUnavailable(
                f"no SQLite lease store at {str(missing)!r}: check the URL (nothing has taken a "
                "lease there yet, or it is another path)", url=mask_url(resolved))
        return connect(resolved)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    with mask_url_arguments(argv):
        return _main(argv)


def _main(argv: list[str]) -> int:
    from .console import exits

    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on usage errors
    try:
        if args.command == "probe":  # judges the store connect() would refuse: opens none
            from .console.probe import run_probe

            probed = run_probe(args)
            sys.stdout.flush()
            return probed
        store = open_store(args.url, args.airflow_conn, args.prefect_block,
                           create=getattr(args, "creates_store", False))
        if args.url is None and args.airflow_conn is None and args.prefect_block is None:
            _say_which_store(store)
        try:
            code: int = args.run(store, args)
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        finally:
            store.close()
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except exits.CommandFailed as exc:
        _error(str(exc))
        return exc.code
    except ConfigurationError as exc:
        _error(str(exc))
        return exits.USAGE
    except CorruptRecord as exc:
        _error(f"{exc}; repair the field or break the lease")
        return exits.UNREADABLE
    except StoreUnavailable as exc:
        _error(f"store unavailable: {exc}")
        return exits.UNAVAILABLE
    except LeaseError as exc:
        _error(str(exc))
        return exits.USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        _error(f"unexpected error ({type(exc).__name__}): {exc}")
        return exits.INTERNAL


def _say_which_store(store: LeaseStore) -> None:
    """In an Airflow environment (``$AIRFLOW_HOME`` set) with no store given,
    say on stderr which store this is and how to read the tasks' one: their
    ``lease_default`` Connection comes first for them, and a ``list`` of the
    embedded file while the tasks use Redis looked like "nothing is held"."""
    if not os.environ.get("AIRFLOW_HOME"):
        return
    origin = "$LEASE_STORE_URL" if os.environ.get("LEASE_STORE_URL") else "the embedded default"
    _error(f"reading {store.url} ({origin}); Airflow tasks read the Connection "
           f"{AIRFLOW_DEFAULT_CONN!r} first when it exists: --airflow-conn {AIRFLOW_DEFAULT_CONN} "
           "reads their store (or --url URL another)")


def _closed_pipe() -> int:
    """The reader stopped reading (``leasectl list | head -1``): end quietly
    as Unix tools do when SIGPIPE ends them, with status 128 + SIGPIPE. The
    output still buffered is dropped (stdout now points at /dev/null), so
    the interpreter's final flush cannot fail again."""
    from .console import exits

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file: nothing to flush
        pass
    finally:
        os.close(devnull)
    return exits.CLOSED_PIPE


def _error(message: str) -> None:
    """Errors go to stderr redacted (a driver's text may quote the DSN) and
    escaped (a key or holder name may carry terminal control codes)."""
    print(f"leasectl: {escape(redact(message))}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

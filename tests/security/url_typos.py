"""Store URLs as people mistype them, with a password in each (issue 32,
finding 3): the generator the URL-typo fuzz tests share, for the core's
errors and ``leasectl`` (tests/security), the Leases page's 503s
(tests/airflow_ui) and the Prefect block (tests/prefect).

Each typo puts the password where a parser once quoted it: a forgotten
``@`` before ``host:port`` (it becomes a host or a port), a slash too many
or too few (it becomes a path or a database number), a PostgreSQL host list
whose ``@`` is missing (libpq quotes it as a port), a raw ``&`` inside a
``?password=`` value (its tail becomes an option of its own). Every host is
127.0.0.1 on a port nothing listens on, so a URL that gets past the checks
fails fast."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

#: Every scheme that names a host: scheme -> (path, query that fails fast).
SCHEMES = {
    "redis": ("/0", "connect_timeout=1"),
    "rediss": ("/0", "connect_timeout=1"),
    "redis+cluster": ("", "connect_timeout=1"),
    "rediss+cluster": ("", "connect_timeout=1"),
    "redis+sentinel": ("/leases/0", "connect_timeout=1"),
    "rediss+sentinel": ("/leases/0", "connect_timeout=1"),
    "postgresql": ("/leases", "connect_timeout=1"),
    "postgres": ("/leases", "connect_timeout=1"),
    "mongodb": ("/leases", "serverSelectionTimeoutMS=300&connectTimeoutMS=300"),
    "mongodb+srv": ("/leases", "serverSelectionTimeoutMS=300&connectTimeoutMS=300"),
}
#: The smallest piece of a password that counts as leaked.
PIECE = 5


@dataclass(frozen=True)
class Typo:
    name: str
    url: str
    #: The parts of the password the URL holds; no ``PIECE``-long piece of
    #: any may appear in what is shown.
    secrets: tuple[str, ...]

    def leaks(self, *texts: str) -> list[str]:
        pieces = {s[i:i + PIECE] for s in self.secrets for i in range(len(s) - PIECE + 1)}
        return sorted({p for p in pieces for t in texts if p in t})


def word(rnd: random.Random, size: int) -> str:
    """Letters and digits, mixed case: no piece occurs in ordinary text."""
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(size))


Shape = Callable[[str, str, str, str, str, str], tuple[str, tuple[str, ...]]]


def _shapes(a: str, b: str) -> dict[str, Shape]:
    """name -> (scheme, host, port, second host:port, path, query) -> (url, secrets)."""
    pw = a + b
    return {
        "'@' forgotten": lambda s, h, p, h2, path, q: (f"{s}://lease:{pw}{h}:{p}{path}?{q}", (pw,)),
        "'@' forgotten, no user": lambda s, h, p, h2, path, q: (f"{s}://:{pw}{h}:{p}{path}?{q}", (pw,)),
        "'@' forgotten before a host list": lambda s, h, p, h2, path, q: (
            f"{s}://:{pw},{h2}{path}?{q}", (pw,)),
        "postgres host list, '@' forgotten": lambda s, h, p, h2, path, q: (
            f"{s}://:{pw},[::1]:{p}{path}?{q}", (pw,)),
        "password where the port goes": lambda s, h, p, h2, path, q: (
            f"{s}://lease@{h}:{pw}{path}?{q}", (pw,)),
        "a slash too many": lambda s, h, p, h2, path, q: (f"{s}:///:{pw}@{h}:{p}{path}?{q}", (pw,)),
        "two slashes too many": lambda s, h, p, h2, path, q: (
            f"{s}:////lease:{pw}@{h}:{p}{path}?{q}", (pw,)),
        "a slash too many, '@' forgotten": lambda s, h, p, h2, path, q: (
            f"{s}:///lease:{pw}{h}:{p}{path}?{q}", (pw,)),
        "a slash too few": lambda s, h, p, h2, path, q: (f"{s}:/:{pw}@{h}:{p}{path}?{q}", (pw,)),
        "no slashes": lambda s, h, p, h2, path, q: (f"{s}:lease:{pw}@{h}:{p}{path}?{q}", (pw,)),
        "no slashes, '@' forgotten": lambda s, h, p, h2, path, q: (
            f"{s}:lease:{pw}{h}:{p}{path}", (pw,)),
        "raw '&' in ?password=": lambda s, h, p, h2, path, q: (
            f"{s}://lease@{h}:{p}{path}?password={a}&{b}", (a, b)),
        "raw '&' in ?password=, then options": lambda s, h, p, h2, path, q: (
            f"{s}://{h}:{p}{path}?{q}&password={a}&{b}&{b[::-1]}&x=1", (a, b, b[::-1])),
        "raw '&' in ?sslpassword=": lambda s, h, p, h2, path, q: (
            f"{s}://{h}:{p}{path}?sslpassword={a}&{b}&{q}", (a, b)),
    }


SHAPE_NAMES = tuple(_shapes("a", "b"))


def typos(rnd: random.Random, closed_port: Callable[[], int]) -> list[Typo]:
    """One typo of every shape for every scheme, each with its own password."""
    made = []
    for scheme, (path, query) in SCHEMES.items():
        for name in SHAPE_NAMES:
            a, b = word(rnd, rnd.randint(6, 9)), word(rnd, rnd.randint(6, 9))
            port, second = closed_port(), f"127.0.0.1:{closed_port()}"
            url, secrets = _shapes(a, b)[name](scheme, "127.0.0.1", str(port), second, path, query)
            made.append(Typo(f"{scheme} {name}", url, secrets))
    return made

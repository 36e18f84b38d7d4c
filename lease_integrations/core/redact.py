"""Keeping store passwords out of every message, log line and repr.

Two layers, because neither alone is enough:

* ``mask_url`` rewrites a URL for display. It does not trust ``urlsplit``: a
  password with an unencoded ``/``, ``?`` or ``#`` ends urlsplit's netloc
  early and would be printed as "path" or "fragment". Credentials are
  everything between ``://`` and the last ``@`` (an ``@`` inside a query
  value excepted), and query values under secret-looking names
  (``password``, ``sslpassword``, ``token``...) are masked too.
* ``redact`` removes known secrets from free text. Drivers put parts of the
  DSN into their own error messages (psycopg's conninfo errors, pymongo's
  option errors); every URL that passes ``remember`` (``parse_url`` and
  ``mask_url`` call it) has its secrets recorded in this process, and every
  ``LeaseError`` message goes through ``redact``, so such text is cleaned
  whichever store or wrapper raised it.

Secrets shorter than ``MIN_SECRET`` characters are masked inside URLs but not
searched for in free text: replacing every "ab" in a message would garble it
while protecting nothing a guess could not find.
"""

from __future__ import annotations

import re
import threading
from typing import Final
from urllib.parse import quote, quote_plus, unquote

MASK: Final = "***"
MIN_SECRET: Final = 4
#: Secrets of this many URLs are kept (oldest forgotten first): a process
#: normally talks to one or two stores.
_KEEP: Final = 64

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(//)?")
#: Query and keyword names whose value is a secret (case-insensitive, anywhere
#: in the name: ``password``, ``sslpassword``, ``ssl_password``, ``tlsCertificate
#: KeyFilePassword``, ``token``, ``secret``, ``api_key``...).
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|credential|api_?key|private|authmechanismproperties",
                          re.IGNORECASE)
#: ``name=value`` pairs outside a URL (a libpq keyword string pasted as a URL).
_LOOSE_PAIR = re.compile(r"([\w.\-]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)")
#: A host list an authority may hold: ``host``, ``host:port``, ``[v6]:port``, comma separated.
_AUTHORITY = re.compile(r"(?:[^:@/?#\[\],]+|\[[^\]]*\])(?::\d*)?"
                        r"(?:,(?:[^:@/?#\[\],]+|\[[^\]]*\])(?::\d*)?)*")

_lock = threading.Lock()
_known: dict[str, tuple[str, ...]] = {}


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(unquote(name)))


def split_credentials(rest: str) -> tuple[str | None, str]:
    """Split what follows ``scheme://`` into (userinfo or None, the rest).

    The credentials end at the last ``@``, except an ``@`` inside a query
    value (``?application_name=me@host``), recognised by a ``=`` between the
    ``?`` and it while the part before the ``?`` is a well-formed host list."""
    ats = [i for i, c in enumerate(rest) if c == "@"]
    first_sep = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    if not ats or first_sep == 0:  # no '@', or no authority at all (sqlite:///a@b.db)
        return None, rest
    authority_ok = bool(_AUTHORITY.fullmatch(rest[:first_sep].rpartition("@")[2]))
    q = rest.find("?")
    for at in reversed(ats):
        if authority_ok and 0 <= q < at and "=" in rest[q:at]:
            continue
        return rest[:at], rest[at + 1:]
    return None, rest


def _mask_query(query: str) -> str:
    pieces = []
    for piece in query.split("&"):
        name, eq, value = piece.partition("=")
        if eq and (is_secret_name(name) or is_secret_name(value)) and value:
            piece = f"{name}={MASK}"
        pieces.append(piece)
    return "&".join(pieces)


def _mask_ports(authority: str) -> str:
    """A "port" that is not a number is most likely a password whose ``@``
    was forgotten (``redis://:secret``): show it as ``***``."""
    hosts = []
    for host in authority.split(","):
        name, colon, port = host.rpartition(":")
        if colon and port and not port.isdigit() and not host.endswith("]"):
            host = f"{name}:{MASK}"
        hosts.append(host)
    return ",".join(hosts)


def _mask_loose(text: str) -> str:
    """A string that is not ``scheme://...``: a keyword DSN or a bare path."""
    def repl(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}{MASK}" if is_secret_name(m.group(1)) else m.group(0)

    masked = _LOOSE_PAIR.sub(repl, text)
    if "@" in masked:
        masked = MASK + masked[masked.rfind("@"):]
    return masked


def mask_url(url: str) -> str:
    """The URL with its password (and secret query values) replaced by ``***``:
    safe for logs, errors and reprs. A URL with nothing secret in it comes
    back unchanged (callers compare to learn whether a URL carries one)."""
    if not isinstance(url, str):
        return f"<{type(url).__name__}, not a URL>"
    remember(url)
    m = _SCHEME.match(url)
    if m is None or m.group(2) is None:
        return _mask_loose(url)
    head, rest = url[:m.end()], url[m.end():]
    userinfo, rest = split_credentials(rest)
    shown = ""
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if any(c in user for c in "/?#@"):
            shown = f"{MASK}@"
        else:
            shown = f"{user}:{MASK}@" if colon else f"{userinfo}@"
    first_sep = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    rest = _mask_ports(rest[:first_sep]) + rest[first_sep:]
    q = rest.find("?")
    if q >= 0:
        rest = rest[:q + 1] + _mask_query(rest[q + 1:])
    elif "#" in rest:
        rest = rest[:rest.find("#")] + "#" + MASK
    masked = head + shown + rest
    return url if masked == url else masked


def url_secrets(url: str) -> tuple[str, ...]:
    """The secret strings a URL holds, in every spelling a driver might echo
    (as written, percent-decoded, percent-encoded)."""
    found: list[str] = []
    m = _SCHEME.match(url)
    if m is not None and m.group(2) is not None:
        userinfo, rest = split_credentials(url[m.end():])
        if userinfo is not None and ":" in userinfo:
            found.append(userinfo.partition(":")[2])
        q = rest.find("?")
        query = rest[q + 1:] if q >= 0 else ""
        for piece in query.split("&"):
            name, eq, value = piece.partition("=")
            if eq and value and (is_secret_name(name) or is_secret_name(value)):
                found.append(value)
    else:
        for pm in _LOOSE_PAIR.finditer(url):
            if is_secret_name(pm.group(1)):
                found.append(pm.group(3).strip("'"))
    spellings: set[str] = set()
    for raw in found:
        plain = unquote(raw)
        spellings.update((raw, plain, quote(plain, safe=""), quote_plus(plain),
                          unquote(raw.replace("+", " "))))
    return tuple(sorted((s for s in spellings if len(s) >= MIN_SECRET), key=len, reverse=True))


def remember(url: str) -> None:
    """Record the secrets of a URL this process is about to use, so ``redact``
    can find them in driver messages later."""
    if not isinstance(url, str) or url in _known:
        return
    secrets = url_secrets(url)
    if not secrets:
        return
    with _lock:
        _known[url] = secrets
        while len(_known) > _KEEP:
            del _known[next(iter(_known))]


def redact(text: str) -> str:
    """``text`` with every remembered secret replaced by ``***``."""
    if not _known or not isinstance(text, str):
        return text
    with _lock:
        secrets = sorted({s for group in _known.values() for s in group}, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


__all__ = ["MASK", "is_secret_name", "mask_url", "redact", "remember", "split_credentials", "url_secrets"]

"""Keeping store passwords out of every message, log line and repr.

Two layers, because neither alone is enough:

* ``mask_url`` rewrites a URL for display. It does not trust ``urlsplit``: a
  password with an unencoded ``/``, ``?`` or ``#`` ends urlsplit's netloc
  early and would be printed as "path" or "fragment". Credentials are
  everything between ``://`` and the last ``@``. A host part that does not
  parse as ``host[:port][,host[:port]...]`` (a password whose ``@`` was
  forgotten: ``redis://u:PWhost:6379``) is masked whole, and so is what
  precedes an ``@`` in a path (a slash too many: ``redis:///:PW@h``). Query
  values under secret-looking names (``password``, ``sslpassword``,
  ``token``...) are masked up to the next ``name=``, so a raw ``&`` inside
  the value does not show its tail.
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
from typing import Final, NamedTuple
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
#: One item of a host list: ``[IPv6]`` or a name without ``:``, then an optional
#: numeric port. Anything else in the host part is taken for credentials.
_HOST_ITEM = re.compile(r"(\[[^\]@]*\]|[^:\[\]@]*)(:\d*)?")
#: Schemes whose URL carries a file path or a name, not a host: an ``@`` in
#: their path is part of the path (``sqlite:///var/a@b.db``).
PATH_SCHEMES: Final = frozenset({"sqlite", "memory"})
#: ``name=value`` pairs outside a URL (a libpq keyword string pasted as a URL).
_LOOSE_PAIR = re.compile(r"([\w.\-]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)")
_lock = threading.Lock()
_known: dict[str, tuple[str, ...]] = {}


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(unquote(name)))


def split_credentials(rest: str) -> tuple[str | None, str]:
    """Split what follows ``scheme://`` into (userinfo or None, the rest).

    The credentials end at the last ``@``. An ``@`` inside a query value
    (``?application_name=me@host``) cannot be told apart from a password
    with an unencoded ``?`` and ``@``, so it counts as credentials too: the
    URL is over-masked, and ``parse_url`` refuses it asking for ``%40``."""
    first_sep = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@")
    if at < 0 or first_sep == 0:  # no '@', or no authority at all (sqlite:///a@b.db)
        return None, rest
    return rest[:at], rest[at + 1:]


class QueryOption(NamedTuple):
    name: str
    value: str
    secret: bool
    raw: str  # as written, ``name=value`` or a bare ``name``


def query_pieces(query: str) -> list[QueryOption]:
    """The options of a raw query string. A secret option's value runs up to
    the next ``name=`` piece: a raw ``&`` inside a password
    (``?password=ab&cd&x=1``) must not make ``cd`` an option of its own,
    which parsers would name in their errors and masks would show."""
    options: list[QueryOption] = []
    for piece in query.split("&"):
        name, eq, value = piece.partition("=")
        if not eq and options and options[-1].secret:
            last = options[-1]
            options[-1] = last._replace(value=f"{last.value}&{piece}", raw=f"{last.raw}&{piece}")
            continue
        secret = bool(eq) and (is_secret_name(name) or is_secret_name(value))
        options.append(QueryOption(name, value, secret, piece))
    return options


def _mask_query(query: str) -> str:
    return "&".join(f"{o.name}={MASK}" if o.secret and o.value else o.raw
                    for o in query_pieces(query))


def host_part_parses(authority: str) -> bool:
    """True when the part after the credentials is ``host[:port]`` items,
    comma-separated: what every store's parser accepts."""
    return all(_HOST_ITEM.fullmatch(item) for item in authority.split(","))


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
    if m is None or (m.group(2) is None and m.group(1).lower() in PATH_SCHEMES):
        return _mask_loose(url)
    head, rest = url[:m.end()], url[m.end():]
    if m.group(2) is None:  # no '//': nothing here parses as a host part
        at = rest.rfind("@")
        return head + MASK + (rest[at:] if at >= 0 else "")
    path_scheme = m.group(1).lower() in PATH_SCHEMES
    cut = _secret_tail(rest)
    if cut is not None:  # ?password=... with an '@' somewhere after it
        before, name = cut
        return head + _mask_rest(before, path_scheme=path_scheme) + f"{name}={MASK}"
    masked = head + _mask_rest(rest, path_scheme=path_scheme)
    return url if masked == url else masked


def _secret_tail(rest: str) -> tuple[str, str] | None:
    """A secret-named query option followed, anywhere later, by an ``@``: its
    value may hold the ``@`` (a raw ``?password=a@b``), so the last-``@`` rule
    would show the value's tail as the host. Returns (text before the option,
    option name); everything from the value on is hidden."""
    q = rest.find("?")
    if q < 0 or "@" not in rest[q:]:
        return None
    offset = q + 1
    for piece in rest[q + 1:].split("&"):
        name, eq, _ = piece.partition("=")
        if eq and is_secret_name(name) and "@" in rest[offset:]:
            return rest[:offset], name
        offset += len(piece) + 1
    return None


def _mask_rest(rest: str, *, path_scheme: bool = False) -> str:
    """Mask what follows ``scheme://``: credentials, a host part that does not
    parse (masked whole, credentials with it), an ``@`` in the path, query secrets."""
    userinfo, rest = split_credentials(rest)
    shown = ""
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if any(c in user for c in "/?#@"):
            shown = f"{MASK}@"
        else:
            shown = f"{user}:{MASK}@" if colon else f"{userinfo}@"
    first_sep = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, rest = rest[:first_sep], rest[first_sep:]
    if not host_part_parses(authority):
        shown, authority = "", MASK
    path_end = min((i for i in (rest.find(c) for c in "?#") if i >= 0), default=len(rest))
    if not path_scheme and "@" in rest[:path_end]:  # a slash too many: redis:///:PW@h:1
        rest = "/" + MASK + rest[rest.rfind("@", 0, path_end):]
    elif not path_scheme and not authority and ":" in rest[:path_end]:  # redis:///u:PWh:1
        rest = "/".join(MASK if ":" in part else part for part in rest[:path_end].split("/")) \
            + rest[path_end:]
    rest = authority + rest
    q = rest.find("?")
    if q >= 0:
        rest = rest[:q + 1] + _mask_query(rest[q + 1:])
    elif "#" in rest:
        rest = rest[:rest.find("#")] + "#" + MASK
    return shown + rest


def url_secrets(url: str) -> tuple[str, ...]:
    """The secret strings a URL holds, in every spelling a driver might echo
    (as written, percent-decoded, percent-encoded)."""
    found: list[str] = []
    m = _SCHEME.match(url)
    if m is not None and m.group(2) is not None:
        cut = _secret_tail(url[m.end():])
        if cut is not None:
            found.append(url[m.end() + len(cut[0]) + len(cut[1]) + 1:])
        userinfo, rest = split_credentials(url[m.end():])
        if userinfo is not None and ":" in userinfo:
            found.append(userinfo.partition(":")[2])
        q = rest.find("?")
        query = rest[q + 1:] if q >= 0 else ""
        for option in query_pieces(query):
            if option.secret and option.value:
                found += [option.value, *option.value.split("&")]
        first_sep = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        for item in rest[:first_sep].split(","):  # a forgotten '@': past the user, a password
            if not _HOST_ITEM.fullmatch(item):
                after_user = item.partition(":")[2]
                found += [after_user, re.sub(r":\d*$", "", after_user)]
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


__all__ = ["MASK", "PATH_SCHEMES", "QueryOption", "host_part_parses", "is_secret_name", "mask_url",
           "query_pieces", "redact", "remember", "split_credentials", "url_secrets"]

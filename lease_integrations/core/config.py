"""Store URLs: where the default store lives, how URLs are split and checked,
and (re-exported from ``redact``) how they are shown safely."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import SplitResult, unquote_plus, urlsplit

from .errors import ConfigurationError
from .redact import (
    MASK,
    PATH_SCHEMES,
    host_part_parses,
    is_secret_name,
    mask_url,
    query_pieces,
    remember,
    split_credentials,
)

ENV_URL = "LEASE_STORE_URL"
_SCHEME_SLASHES = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def default_state_dir() -> Path:
    """Where the embedded store lives: beside Airflow's own files when
    ``$AIRFLOW_HOME`` is set (so every task on that host shares it), else the
    user's state directory (XDG)."""
    airflow_home = os.environ.get("AIRFLOW_HOME")
    if airflow_home:
        return Path(airflow_home) / "lease_integrations"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "lease_integrations"


def default_url() -> str:
    return f"sqlite://{default_state_dir() / 'leases.db'}"


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else ``$LEASE_STORE_URL``, else the
    embedded SQLite default."""
    if url is None:
        url = os.environ.get(ENV_URL) or default_url()
    if not isinstance(url, str) or not url.strip():
        shown = mask_url(url) if isinstance(url, str) else type(url).__name__
        raise ConfigurationError(f"store URL must be a non-empty string, got {shown!r}")
    remember(url)
    return url.strip()


def parse_url(url: str) -> SplitResult:
    """Split a store URL, refusing shapes that drivers would misread.

    A user name or password with an unencoded ``/``, ``?``, ``#`` or ``@``
    is refused: ``urlsplit`` (and libpq, and redis-py) would cut it at that
    character and send part of the password as host, port or path, and
    print it in their errors. The message names the fix, never the value."""
    check_credentials(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        # urllib's text quotes the netloc, which may hold the password.
        raise ConfigurationError(
            f"bad store URL {mask_url(url)!r}: its host part cannot be parsed ([ ] are only "
            "for an IPv6 address; no characters that change under Unicode normalisation)"
        ) from None
    try:
        _ = parts.port  # validates the port
    except ValueError:
        # urllib's message quotes the port text, which may be part of a password.
        raise ConfigurationError(
            f"bad store URL {mask_url(url)!r}: the port is not a number from 0 to 65535"
        ) from None
    if not parts.scheme:
        raise ConfigurationError(
            f"store URL {mask_url(url)!r} has no scheme; use memory://, sqlite:///path, "
            "redis://, rediss://, redis+cluster://, redis+sentinel:// (rediss+ for TLS), "
            "postgresql://, mongodb:// or mongodb+srv://"
        )
    return parts


def check_credentials(url: str) -> None:
    """Refuse the shapes that put a password where a parser quotes it.

    A user name or password with an unencoded ``/``, ``?``, ``#`` or ``@``:
    every parser after this one (``urlsplit``, libpq, redis-py, the Redis
    host-list parser) would cut the URL at that character and quote part of
    the password as a host, port or path in its errors. A host part that is
    not ``host[:port]`` items (a forgotten ``@``: ``redis://u:PWhost:6379``,
    ``postgresql://:PW,[::1]:1/db``, which libpq quotes as a port), and an
    ``@`` or a ``:`` in the path of a URL with no host (a slash too many:
    ``redis:///:PW@h:1``, which would be quoted as a database or a path).
    Multi-host URLs, which skip ``parse_url``, need this check as much as the
    others. The messages name the fix, never the text."""
    remember(url)
    match = _SCHEME_SLASHES.match(url)
    if match is None:
        return
    userinfo, rest = split_credentials(url[match.end():])
    if userinfo is not None and any(c in userinfo for c in "/?#@"):
        raise ConfigurationError(
            f"store URL {mask_url(url)!r}: its user name or password contains an "
            "unencoded '/', '?', '#' or '@'; percent-encode them "
            "(urllib.parse.quote(password, safe='')); an '@' in a query value is "
            "written %40"
        )
    if url[:match.end() - 3].lower() in PATH_SCHEMES:
        return
    host_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    path_end = min((i for i in (rest.find(c) for c in "?#") if i >= 0), default=len(rest))
    host_part, path = rest[:host_end], rest[host_end:path_end]
    if not host_part_parses(host_part):
        raise ConfigurationError(
            f"bad store URL {mask_url(url)!r}: its host part is not host[:port] (or "
            "host:port,host:port): a port that is not a number, or a password whose '@' is "
            "missing (scheme://user:password@host:port)")
    if "@" in path or (not host_part and ":" in path):
        raise ConfigurationError(
            f"bad store URL {mask_url(url)!r}: what follows the host part looks like "
            "credentials: one slash too many after the scheme, or an unencoded '/' in the "
            "password? (scheme://user:password@host:port/...)")


def check_slashes(url: str, schemes: frozenset[str]) -> None:
    """A URL of one of ``schemes`` (those that name a host) without ``//``
    after the scheme (``redis:localhost:6379``, ``redis:/:PW@h``): say that,
    rather than let the store's parser take the text for a path or a
    database number and quote it."""
    scheme, colon, rest = url.partition(":")
    if colon and scheme.lower() in schemes and not rest.startswith("//"):
        raise ConfigurationError(
            f"store URL {mask_url(url)!r} needs '//' after '{scheme}:': "
            f"{scheme}://[user:password@]host[:port]...")


def query_items(query: str) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of a raw query string, decoded: ``parse_qsl``
    with ``keep_blank_values``, except that a secret option's value runs up
    to the next ``name=`` (``redact.query_pieces``): a raw ``&`` in a
    password does not make an "option" out of its tail, which an error
    would name."""
    return [(unquote_plus(o.name), unquote_plus(o.value)) for o in query_pieces(query) if o.raw]


def query_options(parts: SplitResult, allowed: dict[str, type], url: str) -> dict[str, object]:
    """Typed query-string options; an unknown or malformed option is an error
    naming it, not something silently ignored."""
    options: dict[str, object] = {}
    for name, raw in dict(query_items(parts.query)).items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            hint = ("; a password belongs in the URL's user-info part, percent-encoded: "
                    "scheme://user:password@host" if is_secret_name(name) else "")
            raise ConfigurationError(
                f"unknown option {name!r} in store URL {mask_url(url)!r} (known: {known}){hint}"
            )
        kind = allowed[name]
        try:
            if kind is bool:
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(raw)
                options[name] = raw.lower() in ("1", "true", "yes")
            else:
                options[name] = kind(raw)
        except ValueError:
            shown = MASK if is_secret_name(name) else repr(raw)
            raise ConfigurationError(
                f"option {name}={shown} in store URL {mask_url(url)!r} must be a {kind.__name__}"
            ) from None
        if isinstance(options[name], float) and not (0 < float(options[name]) < 3600):  # type: ignore[arg-type]
            raise ConfigurationError(
                f"option {name}={raw!r} in store URL {mask_url(url)!r} must be between 0 and 3600"
            )
    return options


__all__ = ["ENV_URL", "PATH_SCHEMES", "check_credentials", "check_slashes", "default_state_dir",
           "default_url", "mask_url", "parse_url", "query_items", "query_options", "resolve_url"]

"""Store URLs: where the default store lives, and how URLs are shown safely."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import SplitResult, parse_qs, urlsplit, urlunsplit

from .errors import ConfigurationError

ENV_URL = "LEASE_STORE_URL"


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
        raise ConfigurationError(f"store URL must be a non-empty string, got {url!r}")
    return url.strip()


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***``: safe for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{user}:***@{host}" + (f":{port}" if port else "")
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def parse_url(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        _ = parts.port  # validates the port
    except ValueError as exc:
        raise ConfigurationError(f"bad store URL {mask_url(url)!r}: {exc}") from None
    if not parts.scheme:
        raise ConfigurationError(
            f"store URL {mask_url(url)!r} has no scheme; use memory://, sqlite:///path, "
            "redis://, rediss://, postgresql:// or mongodb://"
        )
    return parts


def query_options(parts: SplitResult, allowed: dict[str, type], url: str) -> dict[str, object]:
    """Typed query-string options; an unknown or malformed option is an error
    naming it, not something silently ignored."""
    options: dict[str, object] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ConfigurationError(
                f"unknown option {name!r} in store URL {mask_url(url)!r} (known: {known})"
            )
        raw = values[-1]
        kind = allowed[name]
        try:
            if kind is bool:
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(raw)
                options[name] = raw.lower() in ("1", "true", "yes")
            else:
                options[name] = kind(raw)
        except ValueError:
            raise ConfigurationError(
                f"option {name}={raw!r} in store URL {mask_url(url)!r} must be a {kind.__name__}"
            ) from None
        if isinstance(options[name], float) and not (0 < float(options[name]) < 3600):  # type: ignore[arg-type]
            raise ConfigurationError(
                f"option {name}={raw!r} in store URL {mask_url(url)!r} must be between 0 and 3600"
            )
    return options

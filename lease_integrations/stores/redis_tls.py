"""TLS options of the ``rediss`` schemes, checked before anything connects,
and the hint a refused certificate gets.

Certificates are verified, host names included, on every redis-py the extra
admits: redis-py 5.x leaves ``ssl_check_hostname`` off and 6.0 turned it on,
so the same URL would accept a certificate for another host on one release
and refuse it on the next. Here it follows ``ssl_cert_reqs`` unless the URL
says otherwise.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.config import mask_url
from ..core.errors import ConfigurationError

#: option -> type, for ``query_options``.
OPTIONS: dict[str, type] = {
    "ssl_ca_certs": str, "ssl_certfile": str, "ssl_keyfile": str,
    "ssl_cert_reqs": str, "ssl_check_hostname": bool,
}
_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = ("none", "optional", "required")


def tls_options(url: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Take the TLS options out of ``opts``, checked, with ``ssl_check_hostname``
    made explicit."""
    found = {name: opts.pop(name) for name in list(opts) if name in OPTIONS}
    reqs = found.setdefault("ssl_cert_reqs", "required")
    if reqs not in _CERT_REQS:
        raise ConfigurationError(
            f"ssl_cert_reqs={reqs!r} in {mask_url(url)!r} must be none, optional or required")
    verify = reqs != "none"
    if found.setdefault("ssl_check_hostname", verify) and not verify:
        raise ConfigurationError(
            f"ssl_check_hostname=true in {mask_url(url)!r} needs the certificate checked: "
            "ssl_cert_reqs=required (the default) or optional")
    for name in _FILES:
        path = found.get(name)
        if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ConfigurationError(
                f"{name}={path!r} in {mask_url(url)!r} is not a file this process can read")
    return found


def tls_hint(error_text: str) -> str:
    """What to change when the server's certificate was refused ('' otherwise)."""
    if "CERTIFICATE_VERIFY_FAILED" not in error_text:
        return ""
    if "mismatch" in error_text or "not valid for" in error_text:
        return (" (the server's TLS certificate does not name the host or address in the "
                "URL: connect by a name it carries, or set ssl_check_hostname=false)")
    return (" (the server's TLS certificate did not verify: give the CA that signed it as "
            "ssl_ca_certs=/path/to/ca.pem; ssl_cert_reqs=none skips the check, and with it "
            "what TLS protects against)")


def short_error(exc: BaseException) -> str:
    """A redis-py error without the client reprs some of them carry (Sentinel's
    "No master found" appends every pool's settings), with the TLS hint."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.split(' : <')[0][:300]}{tls_hint(text)}"

"""The password the secrets tests use, the URL shapes that carry it, and the
check that no output contains any piece of it."""

from __future__ import annotations

from urllib.parse import quote, quote_plus

#: Every character that breaks a naive URL split: / ends the netloc, # starts
#: a fragment, ? a query, @ a second "host"; mixed case so no 4-character piece
#: occurs in ordinary text.
PASSWORD = "Kq9/vW#Zx?Jp@Rm"
ENCODED = quote(PASSWORD, safe="")
#: How a driver might spell it: as given, percent-encoded, form-encoded.
SPELLINGS = (PASSWORD, ENCODED, quote_plus(PASSWORD))


def pieces(secret: str, size: int = 4) -> set[str]:
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


PIECES = pieces(PASSWORD) | {ENCODED}


def url_shapes(scheme: str, host: str, path: str, query: str = "") -> dict[str, str]:
    """The ways a user writes a password into a store URL."""
    q = f"&{query}" if query else ""
    plain_q = f"?{query}" if query else ""
    return {
        "raw-userinfo": f"{scheme}://leaseuser:{PASSWORD}@{host}{path}{plain_q}",
        "encoded-userinfo": f"{scheme}://leaseuser:{ENCODED}@{host}{path}{plain_q}",
        "query-encoded": f"{scheme}://leaseuser@{host}{path}?password={ENCODED}{q}",
        "query-raw": f"{scheme}://{host}{path}?password={PASSWORD}{q}",
        "query-sslpassword": f"{scheme}://{host}{path}?sslpassword={ENCODED}{q}",
    }


def assert_no_secret(*texts: str) -> None:
    """No text holds the password or any 4-character piece of it."""
    for text in texts:
        found = sorted(p for p in PIECES if p in text)
        assert not found, f"password pieces {found} in output:\n{text}"

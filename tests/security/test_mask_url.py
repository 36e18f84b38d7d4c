"""mask_url and redact on their own: every URL shape a password can hide in."""

from __future__ import annotations

import random
import string
from urllib.parse import quote

import pytest

from lease_integrations import ConfigurationError, StoreUnavailable
from lease_integrations.core.config import mask_url, parse_url
from lease_integrations.core.redact import redact, remember

from .leaks import ENCODED, PASSWORD, assert_no_secret, url_shapes

SCHEMES = ("redis", "rediss", "postgresql", "mongodb", "mongodb+srv")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_shape_is_masked_and_keeps_the_host(scheme: str) -> None:
    for shape, url in url_shapes(scheme, "db.example:6379", "/0").items():
        masked = mask_url(url)
        assert_no_secret(masked)
        if shape != "query-raw":  # its raw '@' makes all before it credentials
            assert "db.example:6379" in masked, (shape, masked)
        assert masked.startswith(f"{scheme}://"), (shape, masked)


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379/0", "rediss://h:1/0?ssl_ca_certs=/etc/ca.pem",
    "postgresql://u@db:5432/x?sslmode=require&application_name=me%40host",
    "mongodb://h1:1,h2:2/db?replicaSet=rs0&authSource=admin", "sqlite:///var/lib/a@b/leases.db",
    "sqlite:///tmp/x.db?timeout=5", "memory://demo", "/var/lib/leases.db",
])
def test_a_url_without_secrets_comes_back_unchanged(url: str) -> None:
    # run_lease_info relies on this to tell URLs that carry a secret apart.
    assert mask_url(url) == url


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://bob:pw12@h:6379/0", "redis://bob:***@h:6379/0"),
    ("redis://:p%40ss@h/0", "redis://:***@h/0"),
    ("postgresql://u:x@db/x?sslmode=require&sslpassword=abcd", "postgresql://u:***@db/x?sslmode=require&sslpassword=***"),
    ("mongodb://u@h/db?authMechanismProperties=AWS_SESSION_TOKEN:abcd", "mongodb://u@h/db?authMechanismProperties=***"),
    ("rediss://h/0?ssl_password=abcd&prefix=p", "rediss://h/0?ssl_password=***&prefix=p"),
    ("host=db user=u password='a b c' dbname=x", "host=db user=u password=*** dbname=x"),
    ("u:secret1@db:5432", "***@db:5432"),
])
def test_masked_forms(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_unencoded_credentials_are_refused_naming_the_fix_not_the_value() -> None:
    for scheme in SCHEMES:
        url = url_shapes(scheme, "db.example:6379", "/0")["raw-userinfo"]
        with pytest.raises(ConfigurationError, match="percent-encode") as caught:
            parse_url(url)
        assert_no_secret(str(caught.value))


def test_an_at_sign_in_a_query_value_is_refused_asking_for_percent_40() -> None:
    # It cannot be told apart from a password with an unencoded '?' and '@'.
    url = "postgresql://u@db:5432/x?application_name=me@host"
    assert mask_url(url) == "postgresql://***@host"
    with pytest.raises(ConfigurationError, match="%40"):
        parse_url(url)


def test_a_bad_port_is_reported_without_its_text() -> None:
    with pytest.raises(ConfigurationError, match="port is not a number") as caught:
        parse_url("redis://db.example:Kq9vW/0")
    assert "Kq9vW" not in str(caught.value)


def test_remembered_secrets_are_redacted_from_any_text_and_error() -> None:
    remember(f"postgresql://u:{ENCODED}@db/x")
    echo = f"driver said: password={PASSWORD!r} / {ENCODED} in conninfo"
    assert_no_secret(redact(echo))
    assert_no_secret(str(StoreUnavailable(echo, url=f"postgresql://u:{ENCODED}@db/x")))
    assert_no_secret(str(ConfigurationError(echo)))


def said(url: str) -> list[str]:
    """What mask_url shows of a URL, and parse_url's error about it if any."""
    texts = [mask_url(url)]
    try:
        parse_url(url)
    except ConfigurationError as exc:
        texts.append(str(exc))
    return texts


def test_random_passwords_never_show_through_mask_url_or_parse_url() -> None:
    """Random passwords over the characters that break URL parsing, in every
    place a user puts one: no 5-character piece survives masking, and
    parse_url's errors hold none either."""
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "/#?@:%&=+;,!$*'()[] ~"
    for _ in range(3000):
        password = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(6, 16)))
        scheme = rnd.choice(("redis", "postgresql", "mongodb"))
        encoded = quote(password, safe="")
        shown, url = rnd.choice((
            (password, f"{scheme}://u:{password}@db.example:5432/x"),
            (encoded, f"{scheme}://u:{encoded}@db.example:5432/x?sslmode=require"),
            (encoded, f"{scheme}://db.example:5432/x?sslmode=require&password={encoded}&t=1"),
            (password.replace("&", ""),
             f"{scheme}://db.example:5432/x?sslmode=require&password={password.replace('&', '')}"),
        ))
        texts = said(url)
        # Pieces the same message holds for a harmless password ("l://" of
        # "postgresql://", words of the error text) prove nothing.
        benign = " ".join([url.replace(shown, " "), *said(url.replace(shown, "Zz0"))])
        pieces = {shown[i:i + 5] for i in range(len(shown) - 4)}
        pieces = {p for p in pieces if p not in benign}
        for text in texts:
            found = sorted(p for p in pieces if p in text)
            assert not found, (seed, url, text, found)

"""mask_url and redact on their own: every URL shape a password can hide in."""

from __future__ import annotations

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
        assert "db.example:6379" in masked, (shape, masked)
        assert masked.startswith(f"{scheme}://"), (shape, masked)


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379/0", "rediss://h:1/0?ssl_ca_certs=/etc/ca.pem",
    "postgresql://u@db:5432/x?sslmode=require&application_name=me@host",
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

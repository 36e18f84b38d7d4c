"""mask_url and redact on their own: every URL shape a password can hide in."""

from __future__ import annotations

import pickle
import random
import string
from collections.abc import Callable
from urllib.parse import quote

import pytest

from lease_integrations import ConfigurationError, StoreUnavailable, check_url
from lease_integrations.core.config import mask_url, parse_url
from lease_integrations.core.redact import redact, remember
from lease_integrations.stores import STORES, redis_connect

from .leaks import ENCODED, PASSWORD, assert_no_secret, url_shapes

SCHEMES = ("redis", "rediss", "postgresql", "mongodb", "mongodb+srv")
#: Schemes whose URLs list several hosts; the store parses their host list.
MULTI_HOST = ("redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
#: Every scheme with a network location (memory:// and sqlite:// have no password).
NETWORK_SCHEMES = tuple(s for s in STORES if s not in ("memory", "sqlite"))


def hosts_and_path(scheme: str) -> tuple[str, str]:
    """A host list and path of the right shape for ``scheme``."""
    if "sentinel" in scheme:
        return "s1.example:26379,s2.example:26379", "/leases/0"
    if "cluster" in scheme:
        return "c1.example:7000,c2.example:7001", ""
    return "db.example:6379", "/0"


def redis_parse(url: str) -> object:
    return redis_connect.parse(url, {}, {"prefix": str})


#: Everything that checks a URL without connecting: each must refuse with a
#: message free of the password.
CHECKS: tuple[Callable[[str], object], ...] = (parse_url, check_url, redis_parse)


@pytest.mark.parametrize("scheme", NETWORK_SCHEMES)
def test_every_shape_is_masked_and_keeps_the_host(scheme: str) -> None:
    hosts, path = hosts_and_path(scheme)
    for shape, url in url_shapes(scheme, hosts, path).items():
        masked = mask_url(url)
        assert_no_secret(masked)
        if shape != "query-raw":  # its raw '@' makes all before it credentials
            assert hosts in masked, (shape, masked)
        assert masked.startswith(f"{scheme}://"), (shape, masked)


@pytest.mark.parametrize("scheme", NETWORK_SCHEMES)
def test_every_shape_of_every_scheme_is_checked_without_showing_the_password(scheme: str) -> None:
    """check_url (what decorators and leasectl run first) and the Redis
    parser: a raw password is refused naming the fix, and no error, repr or
    pickled copy holds a piece of it."""
    hosts, path = hosts_and_path(scheme)
    for shape, url in url_shapes(scheme, hosts, path).items():
        texts = said(url)
        assert_no_secret(*texts)
        if shape == "raw-userinfo":
            with pytest.raises(ConfigurationError, match="percent-encode"):
                check_url(url)


@pytest.mark.parametrize("url", [
    # issue 24: the host-list errors quoted pieces of the user-info
    f"redis+sentinel://u:{PASSWORD}@s1:26379,s2:26379/leases",
    "redis+cluster://u:Kq9x/vWzRm@c1:7000,c2:7001",
    "redis+cluster://:Kq9xvWzRm,c2:7001",               # the '@' forgotten
    "redis+cluster://c1:7000,c2:Kq9xvWzRm",             # the password where a port goes
    "redis+sentinel://:Kq9xvWzRm,s2:26379/leases",
    "rediss+sentinel://s1:Kq9xvWzRm/leases",
    "redis+cluster://c1:7000,,:Kq9xvWzRm",
    "redis+cluster://u:Kq9xvWzRm\uff03@c1:7000",          # '#' under NFKC normalisation
])
def test_multi_host_url_errors_never_quote_the_user_info(url: str) -> None:
    secret = "Kq9xvWzRm"
    with pytest.raises(ConfigurationError):
        redis_parse(url)  # the store's own parser refuses every one of them
    for text in said(url):
        assert_no_secret(text)
        assert not any(secret[i:i + 4] in text for i in range(len(secret) - 3)), (url, text)


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
    ("u:secret1@db:5432", "u:***@db:5432"),
    # issue 32, finding 3: a host part that does not parse is masked whole;
    # an '@' or ':' where a path goes, and a secret option's value up to the next name=
    ("redis://u:secret1host:6379/0", "redis://***/0"),
    ("postgresql://:secret1,[::1]:1/db", "postgresql://***/db"),
    ("redis:///:secret1@h:1", "redis:///***@h:1"),
    ("redis:///u:secret1h:1/0", "redis:///***/0"),
    ("redis:/:secret1@h:1/0", "redis:***@h:1/0"),
    ("redis:u:secret1h:1", "redis:***"),
    ("redis://h/0?password=ab&cd&ef&prefix=p", "redis://h/0?password=***&prefix=p"),
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
    with pytest.raises(ConfigurationError, match="port that is not a number") as caught:
        parse_url("redis://db.example:Kq9vW/0")
    assert "Kq9vW" not in str(caught.value)


def test_remembered_secrets_are_redacted_from_any_text_and_error() -> None:
    remember(f"postgresql://u:{ENCODED}@db/x")
    echo = f"driver said: password={PASSWORD!r} / {ENCODED} in conninfo"
    assert_no_secret(redact(echo))
    assert_no_secret(str(StoreUnavailable(echo, url=f"postgresql://u:{ENCODED}@db/x")))
    assert_no_secret(str(ConfigurationError(echo)))


def said(url: str) -> list[str]:
    """What mask_url shows of a URL, and every URL check's error about it if
    any: its text, repr and a pickled copy (errors cross processes)."""
    texts = [mask_url(url)]
    for check in CHECKS:
        if check is redis_parse and not url.startswith("redis"):
            continue
        try:
            check(url)
        except ConfigurationError as exc:
            texts += [str(exc), repr(exc), repr(pickle.loads(pickle.dumps(exc)))]
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
        plain = "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(9))
        scheme = rnd.choice(NETWORK_SCHEMES)
        hosts, path = hosts_and_path(scheme)
        path = path or "/"
        encoded = quote(password, safe="")
        first, _, second = hosts.partition(",")
        choices = [
            (password, f"{scheme}://u:{password}@{hosts}{path}"),
            (encoded, f"{scheme}://u:{encoded}@{hosts}{path}?sslmode=require"),
            (encoded, f"{scheme}://{hosts}{path}?sslmode=require&password={encoded}&t=1"),
            (password.replace("&", ""),
             f"{scheme}://{hosts}{path}?sslmode=require&password={password.replace('&', '')}"),
        ]
        if second:  # the '@' forgotten, or the password where a port goes
            choices += [(plain, f"{scheme}://:{plain},{second}{path}"),
                        (plain, f"{scheme}://{first},{second.partition(':')[0]}:{plain}{path}")]
        shown, url = rnd.choice(choices)
        texts = said(url)
        # Pieces the same message holds for a harmless password ("l://" of
        # "postgresql://", words of the error text) prove nothing.
        benign = " ".join([url.replace(shown, " "), *said(url.replace(shown, "Zz0"))])
        pieces = {shown[i:i + 5] for i in range(len(shown) - 4)}
        pieces = {p for p in pieces if p not in benign}
        for text in texts:
            found = sorted(p for p in pieces if p in text)
            assert not found, (seed, url, text, found)

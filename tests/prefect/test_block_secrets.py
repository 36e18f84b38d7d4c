"""A LeaseStoreBlock never shows a password in its plain url field, its repr
or its validation errors (pydantic echoes the input unless told not to)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from security.leaks import ENCODED, PASSWORD, assert_no_secret

from lease_integrations.prefect.block import LeaseStoreBlock


def test_the_password_lives_only_in_the_secret_field() -> None:
    block = LeaseStoreBlock(url=f"postgresql://jobs:{ENCODED}@db:5432/leases")
    assert block.url == "postgresql://jobs@db:5432/leases"
    assert block.password is not None and block.password.get_secret_value() == PASSWORD
    assert_no_secret(block.url, repr(block), str(block), block.model_dump_json())


@pytest.mark.parametrize("url", [
    f"postgresql://jobs:{PASSWORD}@db:5432/leases",     # unencoded: / # ? @ break the split
    f"postgresql://db:5432/leases?password={ENCODED}",  # would sit in the plain url field
    f"redis://db:6379/0?password={PASSWORD}",
    f"rediss://db:6379/0?ssl_password={ENCODED}",
])
def test_a_password_in_the_wrong_place_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LeaseStoreBlock(url=url)
    assert_no_secret(str(caught.value), repr(caught.value))
    assert "percent-encode" in str(caught.value) or "password field" in str(caught.value)


def block_fields(block: LeaseStoreBlock) -> list[str]:
    """Everything a Block shows: the public url field, repr, str, the JSON
    Prefect stores and serves (secrets obscured), and the dict of fields."""
    return [block.url, repr(block), str(block), block.model_dump_json(),
            repr(block.model_dump()), repr(block.model_dump(mode="json"))]


@pytest.mark.parametrize(("url", "public"), [
    (f"redis+sentinel://leases:{ENCODED}@s1:26379,s2:26379/leases/0",
     "redis+sentinel://leases@s1:26379,s2:26379/leases/0"),
    (f"rediss+cluster://:{ENCODED}@c1:7000,c2:7001,[::1]:7002?socket_timeout=2",
     "rediss+cluster://c1:7000,c2:7001,[::1]:7002?socket_timeout=2"),
    (f"redis+cluster://u%40team:{ENCODED}@c1:7000", "redis+cluster://u%40team@c1:7000"),
    (f"postgresql://jobs:{ENCODED}@[::1]:5432/leases?sslmode=require",
     "postgresql://jobs@[::1]:5432/leases?sslmode=require"),
])
def test_a_multi_host_url_keeps_its_hosts_and_moves_the_password_out(url: str, public: str) -> None:
    """issue 24 item 2: multi-host URLs were refused (their port list is not
    one port) or, with a raw '/' in the password, kept it whole in url."""
    block = LeaseStoreBlock(url=url)
    assert block.url == public
    assert block.password is not None and block.password.get_secret_value() == PASSWORD
    assert block.get_url() == url
    assert_no_secret(*block_fields(block))


@pytest.mark.parametrize("url", [
    f"redis+sentinel://u:{PASSWORD}@s1:26379,s2:26379/leases",
    f"redis+cluster://u:{PASSWORD}@c1:7000,c2:7001",
    "redis+cluster://u:Kq9x/vWzRm@c1:7000,c2:7001",
    "redis+cluster://:Kq9xvWzRm/JpRm@c1:7000",
    f"redis+cluster://c1:7000,c2:7001?password={ENCODED}",
])
def test_a_multi_host_url_with_a_misplaced_password_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LeaseStoreBlock(url=url)
    said = str(caught.value) + repr(caught.value)
    assert_no_secret(said)
    assert "Kq9x" not in said and "vWzRm" not in said
    assert "percent-encode" in said or "password field" in said

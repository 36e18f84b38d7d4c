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

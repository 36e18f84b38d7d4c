"""Session fixture `redis_url`: a real redis server for the tests, started on a
free 127.0.0.1 port and stopped at the end of the session.

Placeholder until the redis store lands: skips, or fails when
LEASE_TEST_REQUIRE_ALL=1 (as in the README's test command)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def redis_url() -> str:
    message = "the redis test server is not available yet"
    if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
        pytest.fail(message)
    pytest.skip(message)
    return ""

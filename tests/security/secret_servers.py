"""Fixtures: real servers that check a password containing / # ? @ (a Redis
ACL user and a PostgreSQL role on the session's shared servers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis
from servers.postgres_server import PgServer

from .leaks import ENCODED, PASSWORD


@pytest.fixture
def redis_acl_url(redis_url: str) -> Iterator[str]:
    """A Redis ACL user whose password has / # ? @ in it (on the shared server)."""
    user = f"b2-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser(user, enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"],
                      channels=["*"], commands=["+@all"])
    try:
        yield redis_url.replace("redis://", f"redis://{user}:{ENCODED}@", 1)
    finally:
        admin.acl_deluser(user)
        admin.close()


@pytest.fixture
def postgres_role_url(postgres_server: PgServer) -> Iterator[str]:
    """A PostgreSQL role (scram-sha-256 over TCP) whose password has / # ? @."""
    role = f"b2_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}' IN ROLE lease_user")
    try:
        # Its own table, so the shared tables never get an owner other tests lack.
        yield postgres_server.url.replace("lease_user:s3cret-pw@", f"{role}:{ENCODED}@") \
            + f"?table={role}"
    finally:
        in_db = postgres_server.admin_conninfo.replace("dbname=postgres", "dbname=leases_test")
        with psycopg.connect(in_db, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")

"""What the figures were measured on, so two runs can be compared fairly."""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
from importlib import metadata
from typing import Any

PACKAGES = ("lease_integrations", "redis", "python-redis-lock", "pottery", "psycopg", "pymongo")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def server_versions(urls: dict[str, str]) -> dict[str, str]:
    out = {"sqlite": sqlite3.sqlite_version}
    if "redis" in urls:
        import redis

        client = redis.Redis.from_url(urls["redis"])
        out["redis"] = str(client.info("server").get("redis_version"))
        client.close()
    if "postgres" in urls:
        import psycopg

        with psycopg.connect(urls["postgres"]) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            out["postgres"] = str(row[0]) if row else "?"
    if "mongo" in urls:
        from pymongo import MongoClient

        client2: Any = MongoClient(urls["mongo"])
        try:
            out["mongo"] = "mongoeco wire server, reports " + str(
                client2.admin.command("buildInfo").get("version"))
        finally:
            client2.close()
    return out


def info() -> dict[str, Any]:
    return {
        "cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
        "python": sys.version.split()[0], "packages": versions(),
        "loadavg_start": list(os.getloadavg()),
    }

"""The conformance probe against a store that ignores conditions: a proxy in
front of moto's server that drops ``If-Match`` and ``If-None-Match`` (as
several S3-compatible stores silently do). The probe names each ignored
condition; ``ObjectFence`` refuses the store before writing any output;
``leasectl probe`` exits 8 naming the condition; an honest store passes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from objectstore_helpers import object_names

from lease_integrations.core.errors import ConditionIgnored
from lease_integrations.core.fencing import ObjectFence
from lease_integrations.core.fencing.probe import IF_MATCH, IF_NONE_MATCH, probe
from lease_integrations.core.fencing.s3 import Bucket, parse_place

SECRET = "wJalrXUtnFEMI-probe-secret-K7MDENG"


def test_the_probe_finds_every_ignored_condition(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = s3_proxy_factory(drop_conditions=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    verdict = probe(Bucket(parse_place(url)))
    assert not verdict.honoured
    assert verdict.ignored == (IF_NONE_MATCH, IF_MATCH)
    assert proxy.endpoint in verdict.store and url.split("/")[2] in verdict.store


def test_an_honest_store_passes_the_probe(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = s3_proxy_factory()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    assert probe(Bucket(parse_place(url))).honoured


def test_object_fence_refuses_a_store_that_ignores_conditions_before_writing(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = s3_proxy_factory(drop_conditions=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    with pytest.raises(ConditionIgnored) as refused:
        ObjectFence(url).commit(1, {"part-0.csv": b"x"})
    message = str(refused.value)
    assert url in message and proxy.endpoint in message
    assert "If-None-Match" in message and "If-Match (a stale ETag)" in message
    assert object_names(url) == []  # no staged file, no manifest


def test_the_probe_runs_once_per_bucket_and_process(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = s3_proxy_factory()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    for i in range(3):
        ObjectFence(url).commit(i + 1, {"a.csv": b"x"})
        ObjectFence(url + "/other").commit(i + 1, {"a.csv": b"x"})
    probe_writes = [p for m, p in proxy.seen if m == "PUT" and "/_probe/" in p]
    assert len(probe_writes) == 4  # one probe: create, create again, If-Match, stale If-Match


def leasectl(*args: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_SECRET_ACCESS_KEY": SECRET}
    return subprocess.run([sys.executable, "-m", "lease_integrations.cli", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_leasectl_probe_exits_8_naming_the_ignored_conditions(
    s3_proxy_factory: Callable[..., Any]
) -> None:
    proxy, url = s3_proxy_factory(drop_conditions=True)
    done = leasectl("probe", "--url", url, endpoint=proxy.endpoint)
    assert done.returncode == 8, done
    assert "IGNORED   If-None-Match" in done.stdout and "IGNORED   If-Match" in done.stdout
    assert "ignores If-None-Match" in done.stderr and url in done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_leasectl_probe_passes_an_honest_store(
    s3_proxy_factory: Callable[..., Any]
) -> None:
    proxy, url = s3_proxy_factory()
    done = leasectl("probe", "--url", url, "--json", endpoint=proxy.endpoint)
    assert done.returncode == 0, done
    assert '"honoured": true' in done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_leasectl_probe_of_a_store_that_is_not_an_object_store_is_a_usage_error(
    tmp_path: Any,
) -> None:
    done = leasectl("probe", "--url", f"sqlite://{tmp_path}/x.db", endpoint="http://127.0.0.1:9")
    assert done.returncode == 2, done
    assert "probe checks object stores" in done.stderr


def test_connect_refuses_a_bucket_store_that_ignores_conditions_before_any_lease(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lease_integrations import connect

    proxy, url = s3_proxy_factory(drop_conditions=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    with pytest.raises(ConditionIgnored) as refused:
        connect(url)
    assert url in str(refused.value) and "If-Match (a stale ETag)" in str(refused.value)
    assert object_names(url) == []  # no lease record written
    # Through an honest endpoint the same bucket is a lease store.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.upstream_url)
    with connect(url) as store:
        assert store.acquire("k", "alice", "alice-secret", 30.0, {}).granted

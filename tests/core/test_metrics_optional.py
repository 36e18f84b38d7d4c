"""Metrics cost nothing unless wanted: without opentelemetry-api they are
no-ops, the API is imported only on first use, and with the API but no SDK
recordings go nowhere until an application installs a MeterProvider.

Each case runs in a fresh interpreter: the global provider can be set only
once per process, and import state must start clean."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

EXERCISE = """
from lease_integrations import LeaseBusy, LeaseLock, connect
from lease_integrations.core import metrics

def exercise(name):
    store = connect(f"memory://{name}")
    lock = LeaseLock(store, "job", ttl=3.0, on_lost="check")
    lease = lock.acquire()
    try:
        LeaseLock(store, "job", ttl=30.0).acquire(wait=0)
        raise SystemExit("expected LeaseBusy")
    except LeaseBusy:
        pass
    store.force_release("job", "test")
    assert lease.lost.wait(15)
    lock.release(lease)
"""


def run(body: str) -> str:
    code = textwrap.dedent(EXERCISE) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_without_opentelemetry_everything_is_a_no_op() -> None:
    out = run("""
        import sys
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
        exercise("no-otel")
        print("enabled", metrics.enabled())
    """)
    assert out.split() == ["enabled", "False"]


def test_opentelemetry_is_imported_only_when_a_lease_is_taken() -> None:
    pytest.importorskip("opentelemetry.metrics")
    out = run("""
        import sys
        loaded = lambda: any(m.split(".")[0] == "opentelemetry" for m in sys.modules)
        print("after-import", loaded())
        exercise("lazy")
        print("after-acquire", loaded())
    """)
    assert out.split() == ["after-import", "False", "after-acquire", "True"]


def test_with_the_api_alone_nothing_is_recorded_until_an_sdk_is_installed() -> None:
    pytest.importorskip("opentelemetry.sdk.metrics")
    out = run("""
        from opentelemetry import metrics as otel
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        exercise("api-only")          # instruments made while no SDK was configured
        print("enabled", metrics.enabled())
        reader = InMemoryMetricReader()
        otel.set_meter_provider(MeterProvider(metric_readers=[reader]))
        exercise("api-then-sdk")      # the same instruments now report
        seen = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    seen[m.name] = sum(getattr(p, "count", None) or getattr(p, "value", 0)
                                       for p in m.data.data_points)
        for name in sorted(seen):
            print(name, seen[name])
    """)
    lines = out.splitlines()
    assert lines[0] == "enabled True"
    # One acquire, one busy, one loss, one holding: the run before the SDK left no trace.
    assert sorted(lines[1:]) == ["lease.acquire.duration 1", "lease.busy 1",
                                 "lease.held.duration 1", "lease.lost 1"]

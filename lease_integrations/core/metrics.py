"""OpenTelemetry metrics for leases, through ``opentelemetry-api`` only.

Why this shape: a library must never pick an application's telemetry backend,
so it talks to the API and lets the application install (or not) an SDK
``MeterProvider``. The API's global meter is a proxy: until an SDK is set,
every recording is a no-op call, and instruments made before the SDK was set
start reporting once it is. When ``opentelemetry-api`` is not installed at all,
every function here returns at once. It is imported on the first recording,
not when ``lease_integrations`` is imported, so a job that never takes a lease
never pays for it.

Instruments (meter ``lease_integrations``; attribute ``lease.key``):

- ``lease.acquire.duration`` (histogram, s): the store round trip that granted
  a lease;
- ``lease.busy`` (counter): acquires that gave up because someone else held
  the lease (``LeaseBusy``);
- ``lease.renew.failures`` (counter, attribute ``error.type``): renewals that
  raised and will be retried;
- ``lease.lost`` (counter): leases lost while held (refused renewal, closed
  trust window, operator's break);
- ``lease.held.duration`` (histogram, s): from grant to release, on the
  holder's monotonic clock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

METER_NAME = "lease_integrations"


class _Instruments:
    def __init__(self, meter: Any) -> None:
        self.acquire = meter.create_histogram(
            "lease.acquire.duration", unit="s",
            description="Store round trip of the acquire attempt that granted a lease")
        self.busy = meter.create_counter(
            "lease.busy", unit="{acquire}",
            description="Acquires that gave up because another holder had the lease")
        self.renew_failures = meter.create_counter(
            "lease.renew.failures", unit="{renewal}",
            description="Renewals that raised an error (retried until the trust window closes)")
        self.lost = meter.create_counter(
            "lease.lost", unit="{lease}", description="Leases lost while their holder held them")
        self.held = meter.create_histogram(
            "lease.held.duration", unit="s", description="Time from grant to release")


_lock = threading.Lock()
_loaded = False
_instruments: _Instruments | None = None


def _build(provider: Any | None) -> _Instruments | None:
    try:
        from opentelemetry import metrics as otel
    except ImportError:
        return None
    from .version import __version__

    source = otel if provider is None else provider
    return _Instruments(source.get_meter(METER_NAME, __version__))


def _get() -> _Instruments | None:
    global _loaded, _instruments
    if not _loaded:
        with _lock:
            if not _loaded:
                _instruments = _build(None)
                _loaded = True
    return _instruments


def use_meter_provider(provider: Any | None) -> None:
    """Record into ``provider`` instead of the global one (``None``: back to
    the global provider). For applications that keep a provider of their own,
    and for tests, since the global provider can be set only once."""
    global _loaded, _instruments
    with _lock:
        _instruments = _build(provider)
        _loaded = True


def disable() -> None:
    """Record nothing at all, even through the API's no-op proxy."""
    global _loaded, _instruments
    with _lock:
        _instruments = None
        _loaded = True


def enabled() -> bool:
    """True when recordings reach the OpenTelemetry API (which may still be
    a no-op if no SDK is configured)."""
    return _get() is not None


def acquired(lease: Any, seconds: float) -> None:
    """A lease was granted; ``seconds`` is the granting attempt's duration."""
    inst = _get()
    if inst is None:
        return
    inst.acquire.record(seconds, {"lease.key": lease.key})


def busy(key: str) -> None:
    inst = _get()
    if inst is not None:
        inst.busy.add(1, {"lease.key": key})


def renew_failed(key: str, error_type: str) -> None:
    inst = _get()
    if inst is not None:
        inst.renew_failures.add(1, {"lease.key": key, "error.type": error_type})


def lost(key: str) -> None:
    inst = _get()
    if inst is not None:
        inst.lost.add(1, {"lease.key": key})


def released(lease: Any) -> None:
    """The holder let go of ``lease``: record how long it held it (since the
    start of the attempt that granted it)."""
    inst = _get()
    if inst is not None:
        inst.held.record(time.monotonic() - lease.attempt_started, {"lease.key": lease.key})

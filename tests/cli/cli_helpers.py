"""Small helpers the console tests share: table parsing and bounded polls."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def table_rows(text: str, header_start: str) -> list[dict[str, str]]:
    """Rows of a leasectl table as dicts, columns split on runs of 2+ spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    headers = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows.append(dict(zip(headers, cells + [""] * (len(headers) - len(cells)), strict=True)))
    return rows


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)

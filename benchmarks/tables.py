"""Plain-text tables for the terminal (the JSON file holds every figure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.{digits}f}"
    return str(value)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
          left: Sequence[str] = ("note",)) -> str:
    """Numbers right-aligned; the first column and those named in ``left`` left-aligned."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        out = [v.ljust(w) if i == 0 or headers[i] in left else v.rjust(w)
               for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(out).rstrip()

    rule = "-" * len(line(list(headers)))
    return "\n".join([title, rule, line(list(headers)), rule, *(line(r) for r in cells), ""])

"""How text someone else wrote is shown: holder names, meta, a breaker's name.

Any store client can write those fields, so they may hold characters that act
on a terminal (ESC, BEL, C1 controls), forge a log line (newlines, line and
paragraph separators), reorder or hide text (bidi marks and overrides,
zero-width and tag characters, the soft hyphen), or cannot be encoded at all
(a lone surrogate decoded from a ``"\\ud800"`` JSON escape). ``printable``
shows each of those as an escape. The rule is by Unicode category, not a list
of code points, so nothing a list forgets gets through; it is the one rule
``LeaseBusy``, ``leasectl`` and the Airflow UI all apply.
"""

from __future__ import annotations

import unicodedata
from typing import Final

#: Control, format, surrogate, private use, line and paragraph separators, and
#: unassigned code points (a newer Unicode may make them any of the others).
UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp", "Cn"})
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    code = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """``str(value)`` with every character of an unsafe category shown as a
    Python-style escape (``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``):
    what was stored, made visible and inert, and always encodable."""
    text = str(value)
    if text.isprintable():  # False whenever any unsafe character is present
        return text
    return "".join(_escape(c) if unicodedata.category(c) in UNSAFE_CATEGORIES else c for c in text)


__all__ = ["UNSAFE_CATEGORIES", "printable"]

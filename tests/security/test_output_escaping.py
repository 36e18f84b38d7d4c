"""One rule for text that reaches a terminal or a log: every character a
reader cannot see or a terminal may act on is shown escaped, by Unicode
category (not by a list that misses some), in leasectl and in LeaseBusy."""

from __future__ import annotations

import pickle
import sys
import unicodedata
from datetime import datetime, timezone

from lease_integrations import LeaseBusy, LeaseRecord
from lease_integrations.console.render import escape

#: Control, format (bidi, zero-width, tags, soft hyphen), surrogate, private
#: use, line and paragraph separators, and unassigned code points.
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp", "Cn"}
NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


def test_every_unsafe_code_point_is_escaped_and_every_other_kept() -> None:
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        shown = escape(f"a{c}b")
        if unicodedata.category(c) in UNSAFE:
            assert shown != f"a{c}b" and shown.isascii() and shown.isprintable(), hex(cp)
        else:
            assert shown == f"a{c}b", hex(cp)


def test_escapes_are_readable_and_unambiguous() -> None:
    assert escape("a\nb\tc\x1b[1m") == "a\\nb\\tc\\x1b[1m"
    assert escape("\u202e\u061c\u00ad\ud800") == "\\u202e\\u061c\\xad\\ud800"
    assert escape("\U000e0041x") == "\\U000e0041x"  # not \\ue0041: five hex digits read wrongly


def test_lease_busy_escapes_the_holder_with_the_same_rule_as_meta() -> None:
    """issue 24 item 6: a holder named with an OSC sequence and a newline forged
    a log line in the contender's log; meta was already escaped."""
    holder = "evil\x1b]0;pwned\x07\n2026-11-30 00:00:00 INFO billing done\u202e\u061c\U000e0041"
    record = LeaseRecord("billing", holder, 7, NOW, NOW, NOW, NOW, {"host": holder, "note": "\ud800"})
    busy = LeaseBusy("billing", record)
    for text in (str(busy), str(pickle.loads(pickle.dumps(busy)))):
        assert not any(unicodedata.category(c) in UNSAFE for c in text), ascii(text)
        assert f"held by {escape(holder)} (host={escape(holder)})" in text
    assert not any(unicodedata.category(c) in UNSAFE for c in repr(busy))
    assert busy.holder == holder  # the field keeps what was stored, for code that compares

"""The one timing rule (``lease_integrations.core.timing``) against the SPIN
model's (``proof/lease.pml``): the model's header states the code's shares,
and both split the margin whole between the stop and clock drift. The model
works in ticks of half a margin (``STOP`` ticks for the stop, ``DRIFT`` for
the drift, ``STOP + DRIFT == MARGIN``); the code in shares of the margin
(``STOP_SHARE`` for everything to be gone, ``DRIFT_SHARE`` the rest)."""

from __future__ import annotations

import re
from pathlib import Path

from lease_integrations.core import timing

MODEL = Path(__file__).resolve().parents[2] / "proof" / "lease.pml"


def defines() -> dict[str, int]:
    """The model's plain numeric ``#define``s; of one defined twice, the last
    (the model defines a mutant's value first, under ``#ifdef MUTANT_...``)."""
    return {name: int(value) for name, value in
            re.findall(r"^#define\s+(\w+)\s+(\d+)\b", MODEL.read_text(), re.M)}


def test_the_model_splits_its_margin_as_the_code_does() -> None:
    model = defines()
    assert model["STOP"] + model["DRIFT"] == model["MARGIN"], model
    assert round(timing.STOP_SHARE + timing.DRIFT_SHARE, 9) == 1.0
    assert 0 < timing.LADDER_ENDS < timing.STOP_BEGINS < timing.STOP_SHARE \
        < timing.TIMER_SHARE < 1.0


def test_the_model_states_the_codes_shares() -> None:
    text = MODEL.read_text()
    stated = {
        "STOP_BEGINS": r"stop_at = W \+ ([0-9.]+)\*margin - grace",
        "STOP_SHARE": r"everything gone by W \+ ([0-9.]+)\*margin",
        "TIMER_SHARE": r"its kernel timer at W \+ ([0-9.]+)\*margin",
    }
    for name, pattern in stated.items():
        found = re.search(pattern, text)
        assert found is not None, f"proof/lease.pml no longer states {name} ({pattern})"
        assert float(found.group(1)) == getattr(timing, name), (name, found.group(0))
    split = re.search(r"the code: ([0-9.]+) and ([0-9.]+)\)", text)
    assert split is not None
    assert (float(split.group(1)), float(split.group(2))) == (timing.STOP_SHARE,
                                                              timing.DRIFT_SHARE)

"""The checker must catch what it is there to catch: feed it bad histories."""

from __future__ import annotations

from typing import Any

from history import check, tokens_granted_twice


def ev(t: int, ev: str, worker: str, pid: int, **data: Any) -> dict[str, Any]:
    return {"t": t, "ev": ev, "worker": worker, "pid": pid, **data}


GOOD = [
    ev(1, "acquire", "a", 1, token=1), ev(2, "write", "a", 1, token=1, ok=True),
    ev(3, "release", "a", 1, token=1),
    ev(4, "acquire", "b", 2, token=2), ev(5, "write", "b", 2, token=2, ok=True),
    ev(6, "release", "b", 2, token=2),
]


def test_a_clean_history_passes() -> None:
    verdict = check(GOOD, [1, 2], [1, 1, 2], 2)
    assert verdict.violations == [] and len(verdict.grants) == 2


def test_repeated_or_decreasing_tokens_break_rule_1() -> None:
    bad = [dict(e) for e in GOOD]
    bad[3]["token"] = 1
    assert check(bad, [1], [1], 1).rule1


def test_unexplained_overlap_breaks_rule_2() -> None:
    overlapping = [
        ev(1, "acquire", "a", 1, token=1), ev(2, "acquire", "b", 2, token=2),
        ev(3, "release", "a", 1, token=1), ev(4, "release", "b", 2, token=2),
    ]
    verdict = check(overlapping, [], [2], 2)
    assert verdict.rule2 and not verdict.overlaps_explained


def test_overlap_during_an_injected_pause_is_explained_and_names_the_stale_holder() -> None:
    overlapping = [
        ev(1, "acquire", "a", 1, token=1), ev(2, "acquire", "b", 2, token=2),
        ev(3, "release", "b", 2, token=2), ev(4, "lost", "a", 1, token=1),
        ev(5, "write", "a", 1, token=1, ok=False), ev(6, "release", "a", 1, token=1),
        {"t": 7, "ev": "paused", "worker": "harness", "pid": 0, "target": 1, "from": 1, "to": 3},
    ]
    verdict = check(overlapping, [2], [2], 2)
    assert verdict.rule2 == [] and verdict.violations == []
    assert "a (token 1)" in verdict.overlaps_explained[0] and "stale holder" in verdict.overlaps_explained[0]
    assert verdict.stale_writes_rejected == 1


def test_a_holder_told_of_its_loss_before_the_takeover_does_not_overlap() -> None:
    history = [
        ev(1, "acquire", "a", 1, token=1), ev(2, "lost", "a", 1, token=1),
        ev(3, "acquire", "b", 2, token=2), ev(4, "gave_up", "a", 1, token=1),
        ev(5, "release", "b", 2, token=2),
    ]
    assert check(history, [], [2], 2).violations == []


def test_a_killed_holder_ends_at_its_kill() -> None:
    history = [
        ev(1, "acquire", "a", 1, token=1),
        {"t": 2, "ev": "killed", "worker": "harness", "pid": 0, "target": 1},
        ev(3, "acquire", "b", 2, token=2), ev(4, "release", "b", 2, token=2),
    ]
    assert check(history, [], [1, 2], 2).violations == []


def test_resource_going_back_breaks_rule_3() -> None:
    assert check(GOOD, [2, 1], [2], 2).rule3


def test_counter_going_back_or_forgetting_a_grant_breaks_rule_4() -> None:
    assert check(GOOD, [1, 2], [2, 1], 2).rule4
    assert check(GOOD, [1, 2], [1, 2], 1).rule4
    assert check(GOOD, [1, 2], [1, 2], None).rule4


def test_a_token_granted_twice_breaks_rule_5_even_far_apart() -> None:
    """Failover to a lagging replica: tokens 4, 5, 6 granted again after 6."""
    reissued = [ev(t, "acquire", f"w{t}", t, token=tok) for t, tok in
                enumerate([1, 2, 3, 4, 5, 6, 4, 5, 6], start=1)]
    verdict = check(reissued, [], [], 6)
    assert verdict.rule5 == ["token 4 granted twice: to w4 and to w7",
                             "token 5 granted twice: to w5 and to w8",
                             "token 6 granted twice: to w6 and to w9"]
    assert check(GOOD, [1, 2], [1, 1, 2], 2).rule5 == []
    assert tokens_granted_twice([(7, "a"), (9, "b")]) == []


def test_a_holder_paused_before_logging_its_acquire_is_judged_from_when_acquire_returned() -> None:
    """a got token 1 (trusted until 10), was paused before its log line past
    the window, b took token 2 meanwhile; a's line comes last. Judged by the
    log line's time, token 1 would begin after token 2: a false rule-1
    violation. Judged from ``since`` (acquire's return), the tokens rise and
    the overlap is a's pause."""
    history = [
        ev(20, "acquire", "b", 2, token=2, since=20, trusted_until=30),
        ev(25, "release", "b", 2, token=2),
        ev(40, "acquire", "a", 1, token=1, since=2, trusted_until=10),
        ev(41, "lost", "a", 1, token=1), ev(42, "gave_up", "a", 1, token=1),
        {"t": 43, "ev": "paused", "worker": "harness", "pid": 0, "target": 1, "from": 3, "to": 39},
    ]
    verdict = check(history, [2], [2], 2)
    assert verdict.violations == [] and verdict.overlaps_explained
    as_logged = [{k: v for k, v in e.items() if k not in ("since", "trusted_until")}
                 for e in history]
    assert check(as_logged, [2], [2], 2).rule1


def test_a_lease_returned_after_its_window_closed_is_no_hold() -> None:
    """Paused inside acquire() after its window check, a got a lease whose
    window had closed (it never trusted it): not a hold that breaks rule 1,
    but still a grant (rule 5 and the newest token count it)."""
    history = [
        ev(20, "acquire", "b", 2, token=2, since=20, trusted_until=30),
        ev(25, "release", "b", 2, token=2),
        ev(40, "acquire", "a", 1, token=1, since=40, trusted_until=10),
        ev(41, "lost", "a", 1, token=1), ev(42, "gave_up", "a", 1, token=1),
    ]
    verdict = check(history, [2], [2], 2)
    assert verdict.violations == [] and len(verdict.grants) == 2
    assert "1 returned past their trust window" in verdict.summary()
    still_trusted = [dict(e, trusted_until=50) if e["ev"] == "acquire" and e["worker"] == "a"
                     else e for e in history]
    assert check(still_trusted, [2], [2], 2).rule1

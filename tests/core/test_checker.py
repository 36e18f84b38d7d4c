"""The public history checker must catch what it is there to catch: feed it
good and bad histories and read its report."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from lease_integrations import LeaseEvent
from lease_integrations.core.checker import FencedWrite, Hold, check_history

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
KEY = "nightly-billing"


def ev(seconds: float, kind: str, token: int, holder: str | None, **detail: object) -> LeaseEvent:
    return LeaseEvent(KEY, kind, token, holder, T0 + timedelta(seconds=seconds), dict(detail))  # type: ignore[arg-type]


GOOD = [
    ev(0, "acquired", 1, "a"), ev(5, "released", 1, "a"),
    ev(6, "acquired", 2, "b"),                      # b lets it expire (ttl 10)...
    ev(17, "acquired", 3, "c"), ev(18, "broken", 3, "c", by="ops"), ev(18.5, "lost", 3, "c"),
    ev(19, "acquired", 4, "a"),
]


def test_a_clean_history_passes_and_says_so() -> None:
    writes = [FencedWrite(1, True), FencedWrite(2, True), FencedWrite(1, False), FencedWrite(4, True)]
    report = check_history(GOOD, writes, ttl=10)
    assert report.ok and report.first is None, str(report)
    assert (report.key, report.grants, report.writes_accepted, report.writes_refused) == (KEY, 4, 3, 1)
    assert str(report).startswith(f"history of {KEY!r}: 4 grant(s), 3 write(s) accepted, 1 refused")
    assert "OK" in str(report)


def test_a_token_granted_twice_or_going_back_is_reported_first() -> None:
    reissued = [*GOOD, ev(40, "acquired", 3, "d")]
    report = check_history(reissued, ttl=10)
    assert not report.ok and report.first is not None
    assert report.first.rule == "token-order" and report.first.tokens == (3,)
    assert "token 3 granted twice: to c and to d" in str(report)
    assert "first violation: [token-order]" in str(report)


def test_a_grant_before_the_previous_lease_could_expire_is_reported() -> None:
    early = [ev(0, "acquired", 1, "a"), ev(4, "acquired", 2, "b")]
    report = check_history(early, ttl=10)
    assert [v.rule for v in report.violations] == ["early-grant"]
    assert report.violations[0].tokens == (1, 2) and "6.000 s before token 1" in str(report)
    assert check_history(early, ttl=3.9).ok  # with a ttl that short, it could have expired
    assert check_history(early, ttl=4.05, drift=0.1).ok  # within the drift bound
    lenient = check_history(early)
    assert lenient.ok and any("no ttl given" in n for n in lenient.notes)


def test_a_release_of_a_superseded_token_is_reported() -> None:
    history = [ev(0, "acquired", 1, "a"), ev(11, "acquired", 2, "b"), ev(12, "released", 1, "a")]
    report = check_history(history, ttl=10)
    assert [v.rule for v in report.violations] == ["stale-release"]
    twice = check_history([ev(0, "acquired", 1, "a"), ev(1, "released", 1, "a"),
                           ev(2, "released", 1, "a")])
    assert [v.rule for v in twice.violations] == ["stale-release"]


def test_a_break_of_an_already_released_record_is_no_violation() -> None:
    history = [ev(0, "acquired", 1, "a"), ev(1, "released", 1, "a"), ev(2, "broken", 1, None, by="ops")]
    assert check_history(history, ttl=10).ok


def test_events_going_back_in_time_are_reported() -> None:
    history = [ev(5, "acquired", 1, "a"), ev(1, "released", 1, "a")]
    assert [v.rule for v in check_history(history).violations] == ["event-order"]
    assert check_history(history, drift=5).ok


def test_an_accepted_stale_write_is_reported_a_refused_one_is_not() -> None:
    writes = [FencedWrite(1, True), FencedWrite(2, True), FencedWrite(1, True)]
    report = check_history(GOOD, writes, ttl=10)
    assert [v.rule for v in report.violations] == ["stale-write"]
    assert report.violations[0].tokens == (1, 2)
    assert check_history(GOOD, [FencedWrite(2, True), FencedWrite(1, False)], ttl=10).ok


def test_a_write_with_a_token_never_granted_is_reported() -> None:
    report = check_history(GOOD, [FencedWrite(9, True)], ttl=10)
    assert [v.rule for v in report.violations] == ["unknown-token"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_write_sent_after_a_newer_grant_is_an_overlap_unless_the_lease_was_broken() -> None:
    late = [FencedWrite(2, True, at(17.6), sent=at(17.5))]  # b wrote after c's grant at 17
    report = check_history(GOOD, late, ttl=10)
    assert [v.rule for v in report.violations] == ["late-write"]
    assert report.violations[0].tokens == (2, 3) and "sent at" in str(report)
    assert check_history(GOOD, late, ttl=10, drift=1).ok  # within the drift bound
    after_break = [FencedWrite(3, True, at(19.2))]  # c was broken at 18
    explained = check_history(GOOD, after_break, ttl=10)
    assert explained.ok and any("broken by an operator" in n for n in explained.notes)


def test_overlapping_holds_are_reported_unless_broken() -> None:
    holds = [Hold(1, 0.0, 5.0, "a"), Hold(2, 4.0, 8.0, "b"), Hold(3, 8.0, 9.0, "c")]
    report = check_history(holds=holds)
    assert [(v.rule, v.tokens) for v in report.violations] == [("overlap", (1, 2))]
    assert check_history(holds=holds, drift=1.0).ok
    broken = [ev(0, "acquired", 1, "a"), ev(3, "broken", 1, "a", by="ops"), ev(4, "acquired", 2, "b")]
    assert check_history(broken, holds=holds, ttl=10).ok
    backwards = check_history(holds=[Hold(2, 0.0, 1.0), Hold(1, 2.0, 3.0)])
    assert [v.rule for v in backwards.violations] == ["token-order"]


def test_a_trimmed_history_is_noted_not_failed() -> None:
    trimmed = [ev(0, "released", 7, "a"), ev(1, "acquired", 8, "b")]
    report = check_history(trimmed, [FencedWrite(5, True), FencedWrite(8, True)], ttl=10)
    assert report.ok and any("trimmed" in n for n in report.notes)


def test_a_negative_drift_is_refused() -> None:
    with pytest.raises(ValueError, match="drift"):
        check_history(drift=-1)


def test_a_write_in_flight_at_the_next_grant_is_a_hazard_not_a_violation() -> None:
    """b sent its write before c's grant at 17 (or we do not know when); it
    landed after, before c wrote: the protocol permits that (the model's
    writes in flight), so it is a named hazard; once c wrote, it is stale."""
    landed = [FencedWrite(2, True, at(17.5), sent=at(16.9)), FencedWrite(3, True, at(17.6))]
    report = check_history(GOOD, landed, ttl=10)
    assert report.ok, str(report)
    assert [(h.rule, h.tokens) for h in report.hazards] == [("in-flight-write", (2, 3))]
    assert "hazard: [in-flight-write]" in str(report)
    unknown = check_history(GOOD, [FencedWrite(2, True, at(17.5))], ttl=10)
    assert unknown.ok and [h.rule for h in unknown.hazards] == ["in-flight-write"]
    after_newer = check_history(GOOD, [FencedWrite(3, True, at(17.4)),
                                       FencedWrite(2, True, at(17.5), sent=at(16.9))], ttl=10)
    assert [v.rule for v in after_newer.violations] == ["stale-write"]


def test_a_write_stamped_before_its_grant_is_reported() -> None:
    """Token 3 was granted at 17: a write of it at 16 came from no lease."""
    for write in (FencedWrite(3, True, at(16.0)), FencedWrite(3, True, at(17.2), sent=at(16.0))):
        report = check_history(GOOD, [write], ttl=10)
        assert [(v.rule, v.tokens) for v in report.violations] == [("early-write", (3,))], report
        assert "1.000 s before token 3 was granted" in str(report)
    assert check_history(GOOD, [FencedWrite(3, True, at(16.0))], ttl=10, drift=1.5).ok
    assert check_history(GOOD, [FencedWrite(3, False, at(16.0))], ttl=10).ok  # refused


def test_a_takeover_must_name_the_newest_live_grant() -> None:
    took = {"meta": {}, "took_over": {"token": 2, "holder": "b"}}
    right = [ev(0, "acquired", 1, "a"), ev(1, "released", 1, "a"), ev(2, "acquired", 2, "b"),
             ev(13, "acquired", 3, "c", **took)]
    assert check_history(right, ttl=10).ok
    never_newest = [*right[:3], ev(13, "acquired", 3, "c", meta={},
                                   took_over={"token": 1, "holder": "a"})]
    report = check_history(never_newest, ttl=10)
    assert [(v.rule, v.tokens) for v in report.violations] == [("took-over", (2, 3))]
    assert "took over token 1, but the newest grant was token 2" in str(report)
    released = [*right[:3], ev(5, "released", 2, "b"), ev(13, "acquired", 3, "c", **took)]
    report = check_history(released, ttl=10)
    assert [v.rule for v in report.violations] == ["took-over"]
    assert "already released or broken" in str(report)


def test_one_token_held_by_several_adopters_is_one_grant() -> None:
    """A DAG-run lease: the keeper holds token 5 for the whole run and each task
    adopts it, at once or one after another; token 6 is the next run's."""
    history = [ev(0, "acquired", 5, "dagrun:r1"), ev(30, "released", 5, "dagrun:r1"),
               ev(31, "acquired", 6, "dagrun:r2")]
    holds = [Hold(5, 0.0, 30.0, "keeper"), Hold(5, 1.0, 10.0, "task-a", adopted=True),
             Hold(5, 10.0, 29.0, "task-b", adopted=True), Hold(5, 2.0, 5.0, "task-c", adopted=True),
             Hold(6, 31.0, 40.0, "keeper")]
    writes = [FencedWrite(5, True, at(2)), FencedWrite(5, True, at(12)), FencedWrite(6, True, at(32))]
    report = check_history(history, writes, holds=holds, ttl=10)
    assert report.ok and not report.hazards, str(report)
    late_adopter = [*holds, Hold(5, 35.0, 36.0, "task-d", adopted=True)]  # trusts 5 after 6
    report = check_history(history, holds=late_adopter, ttl=10)
    assert {v.rule for v in report.violations} == {"token-order", "overlap"}, str(report)
    # two holders each granted token 5 (a reissued token), neither adopting: not one grant
    twice = check_history(holds=[Hold(5, 0.0, 3.0, "a"), Hold(5, 4.0, 6.0, "b")])
    assert [(v.rule, v.tokens) for v in twice.violations] == [("token-order", (5,))], str(twice)
    assert "token 5 granted twice" in str(twice)

"""Hybrid logical clock: monotonic, causal, drift-bounded; and the intake that holds early events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.clock import MAX_COUNTER, ClockDriftError, HybridClock, Timestamp
from agents.core.events import ProposalBody, Subgoal
from agents.core.intake import HOLD_HORIZON_MS, MAX_HELD_PER_AUTHOR, Admitted, Held, Intake, Refused
from tests.builders import Feed, gate


class FakeTime:
    def __init__(self, ms: int = 0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@given(st.lists(st.tuples(st.integers(0, 10_000), st.booleans(), st.integers(0, 10_000)), max_size=60))
def test_ticks_strictly_increase_and_follow_everything_observed(steps) -> None:
    time = FakeTime()
    clock = HybridClock(time, max_drift_ms=1_000_000)
    last = Timestamp(-1, 0)
    for physical, remote_first, remote_ms in steps:
        time.ms = physical  # may go backwards
        if remote_first:
            remote = Timestamp(remote_ms, 3)
            clock.observe(remote)
            stamp = clock.tick()
            assert stamp > remote
        else:
            stamp = clock.tick()
        assert stamp > last
        assert stamp.ms >= physical
        last = stamp


def test_a_remote_stamp_beyond_the_drift_bound_is_not_merged() -> None:
    time = FakeTime(1000)
    clock = HybridClock(time, max_drift_ms=500)
    clock.observe(Timestamp(1500, 0))  # exactly at the bound: fine
    with pytest.raises(ClockDriftError, match="501 ms ahead"):
        clock.observe(Timestamp(1501, 0))
    assert clock.tick() == Timestamp(1500, 1)


def test_restore_never_stamps_at_or_before_the_last_own_event() -> None:
    clock = HybridClock(FakeTime(10))
    clock.restore(Timestamp(50, 7))
    assert clock.tick() == Timestamp(50, 8)


def test_a_counter_at_its_limit_moves_the_clock_to_the_next_millisecond() -> None:
    """One peer stamping the largest counter must not make every receiver's next stamp
    overflow the schema (which used to stop their act loops)."""
    clock = HybridClock(FakeTime(100))
    clock.observe(Timestamp(105, MAX_COUNTER))
    assert clock.tick() == Timestamp(106, 0)
    assert clock.peek() == Timestamp(106, 1)


def _proposal(ms: int, author: str = "c"):
    return Feed(author, "decomposer").at(ms, ProposalBody(node="ab" * 32, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))))


def _goal(ms: int):
    return _proposal(ms)


def test_intake_holds_an_event_from_the_future_and_admits_it_when_its_time_comes() -> None:
    time = FakeTime(1000)
    intake = Intake(HybridClock(time, max_drift_ms=100), gate())
    early = _goal(5000)
    answer = intake.offer(early.to_wire())
    assert isinstance(answer, Held) and "held" in answer.reason and intake.held == 1
    time.ms = 4800
    assert intake.release_due() == []
    time.ms = 4900
    assert intake.release_due() == [early]
    assert intake.held == 0
    assert intake.clock.tick() > early.ts


def test_intake_refuses_bad_bytes_with_the_rule_and_counts_them() -> None:
    intake = Intake(HybridClock(FakeTime(0)), gate())
    answer = intake.offer(b'{"v": 1}')
    assert isinstance(answer, Refused) and answer.rule == "schema"
    assert intake.refused == {"schema": 1}
    assert isinstance(intake.offer(_goal(0).to_wire()), Admitted)


def test_events_far_ahead_are_refused_for_now_and_not_fetched_again_until_their_time() -> None:
    time = FakeTime(1000)
    intake = Intake(HybridClock(time), gate())
    year_ahead = _proposal(1000 + 365 * 24 * 3600 * 1000)
    answer = intake.offer(year_ahead.to_wire())
    assert isinstance(answer, Refused) and answer.rule == "future" and intake.held == 0
    assert intake.knows(year_ahead.id)  # sync skips it
    assert not isinstance(intake.offer(year_ahead.to_wire()), Admitted) and intake.refused == {"future": 1}
    time.ms = year_ahead.ts.ms - HOLD_HORIZON_MS
    assert not intake.knows(year_ahead.id)  # within the horizon now: it may be fetched and held
    assert isinstance(intake.offer(year_ahead.to_wire()), Held)


def test_held_events_are_bounded_per_author() -> None:
    intake = Intake(HybridClock(FakeTime(0)), gate())
    feed = Feed("flooder", "decomposer")
    body = ProposalBody(node="ab" * 32, strategy="s", subgoals=(Subgoal(title="a", executable=True),
                                                                Subgoal(title="b", executable=True)))
    answers = [intake.offer(feed.at(60_000 + i, body).to_wire()) for i in range(MAX_HELD_PER_AUTHOR + 5)]
    assert sum(isinstance(a, Held) for a in answers) == MAX_HELD_PER_AUTHOR == intake.held
    assert intake.refused == {"hold-full": 5}
    assert isinstance(intake.offer(_proposal(100, "someone else").to_wire()), Admitted)

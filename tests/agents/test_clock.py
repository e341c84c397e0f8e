"""Hybrid logical clock: monotonic, causal, drift-bounded; and the intake that holds early events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.clock import ClockDriftError, HybridClock, Timestamp
from agents.core.events import GoalBody, sign_event
from agents.core.identity import Identity
from agents.core.intake import Admitted, Held, Intake, Refused


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


def _goal(ms: int):
    return sign_event(Identity(b"c" * 32), "client", 1, None, Timestamp(ms, 0),
                      GoalBody(text="g", quorum=1, max_depth=1, claim_lease_ms=1000))


def test_intake_holds_an_event_from_the_future_and_admits_it_when_its_time_comes() -> None:
    time = FakeTime(1000)
    intake = Intake(HybridClock(time, max_drift_ms=100))
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
    intake = Intake(HybridClock(FakeTime(0)))
    answer = intake.offer(b'{"v": 1}')
    assert isinstance(answer, Refused) and answer.rule == "schema"
    assert intake.refused == 1
    assert isinstance(intake.offer(_goal(0).to_wire()), Admitted)

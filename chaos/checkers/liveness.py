"""Liveness: the plan completes whenever the faults leave enough of every role."""

from __future__ import annotations

from collections import Counter

from agents.core.events import GoalBody
from chaos.checkers.verdict import Verdict
from chaos.history import History


def _needed(quorum: int) -> dict[str, int]:
    return {"decomposer": 1, "scorer": quorum, "executor": 1}


def liveness(history: History) -> Verdict:
    """The plan completes whenever the faults leave a quorum of the roster's scorers, a
    decomposer and an executor alive, connected and able to sign; when they don't, the run
    is reported as a stall with its length, not as an error. A member that lost own events
    nobody else held cannot sign without forking and counts as lost. No other excuse: two
    surviving scorers who disagree, or drafts nobody likes, must not stall a node."""
    live = [m for m in history.live() if m.role != "observer" and not m.mute]
    mute = sorted(m.name for m in history.live() if m.mute)
    done = [m for m in history.live() if m.complete]
    if history.live() and len(done) == len(history.live()):
        last = max(m.completed_at or 0.0 for m in done)
        return Verdict("liveness", "pass", f"all {len(done)} live members saw the plan complete by t={last:.1f}s")
    alive = Counter(m.role for m in live)
    short = [f"{role}s {alive.get(role, 0)}/{need}" for role, need in _needed(history.quorum).items()
             if alive.get(role, 0) < need]
    goal_held = any(isinstance(e.body, GoalBody) for m in history.live() for e in m.events)
    # time the members were free to act: not the drain, when they were told to hold still
    stalled_for = (history.drained_from or history.ended_at) - history.last_fault_at
    if short or not goal_held:
        why = ", ".join(short) if short else "no live member holds the goal"
        if mute:
            why += (f"; {', '.join(mute)} cannot sign: their stores lost own events that no peer held, and "
                    "signing again would fork them")
        return Verdict("liveness", "stall",
                       f"incomplete after {stalled_for:.1f}s without faults, but too few survived ({why})")
    incomplete = sorted(m.name for m in history.live() if not m.complete)
    return Verdict("liveness", "fail",
                   f"a quorum of every role survived, yet {', '.join(incomplete)} had no complete plan "
                   f"{stalled_for:.1f}s after the last fault")



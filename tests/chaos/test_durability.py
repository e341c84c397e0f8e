"""``durability`` and the goal: a member that told the goal's client it held the goal (its
served summary listed it: the client leaves on that word) must hold it across every restart
after, power cuts included; one that never said so may lose it to a power cut like any other
author's event no fsync covered; a store the nemesis destroyed on purpose voids the word given
with it. Histories built by hand: the rule is the checker's, judged apart from any run.
"""

from __future__ import annotations

from chaos.checkers.convergence import durability
from chaos.history import History, MemberHistory, Restart

GOAL = "9a" * 32
OTHER = "5c" * 32


def _history(said_at: float | None, *restarts: Restart) -> History:
    history = History(scenario="hand", seed=0, shape={"scorer": 1}, quorum=1, goal=GOAL)
    member = MemberHistory("scorer-0", "scorer", "peer-s0")
    member.restarts.extend(restarts)
    history.members[member.name] = member
    if said_at is not None:
        history.goal_held_by[member.name] = said_at
    return history


def _power_cut(at: float, *lost: str) -> Restart:
    return Restart(at, held_before=5, lost=lost, power_cut=True, lost_by=tuple("client" for _ in lost))


def test_a_member_that_said_it_held_the_goal_fails_when_a_power_cut_takes_it() -> None:
    verdict = durability(_history(1.0, _power_cut(5.0, GOAL)))
    assert not verdict.passed
    assert "without the goal" in verdict.evidence and "t=1.0s" in verdict.evidence


def test_a_member_that_never_said_so_may_lose_the_goal_to_a_power_cut() -> None:
    assert durability(_history(None, _power_cut(5.0, GOAL))).passed
    assert durability(_history(6.0, _power_cut(5.0, GOAL))).passed  # it said so only after


def test_a_store_destroyed_on_purpose_voids_the_word_given_with_it() -> None:
    wiped = Restart(3.0, held_before=5, lost=(GOAL, OTHER), fault="wipe")
    assert durability(_history(1.0, wiped, _power_cut(5.0, GOAL))).passed
    said_again = _history(4.0, wiped, _power_cut(5.0, GOAL))  # it said so again after the wipe
    assert not durability(said_again).passed


def test_a_restart_without_a_power_cut_loses_the_goal_for_nobody() -> None:
    kill = Restart(5.0, held_before=5, lost=(GOAL,), lost_by=("client",))
    assert not durability(_history(None, kill)).passed

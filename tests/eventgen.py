"""Hypothesis strategies for adversarial event sets, shared by the property tests.

A "universe" is a goal with several decomposers proposing competing splits,
scorers voting with arbitrary timestamps (some before the proposal they vote
on), second-level proposals under every first-level subgoal, and executors
racing for claims on any subgoal, renewing, failing and publishing results,
some after their lease ran out. Every event is properly signed and chained:
what is adversarial is the timing and the competition, which is exactly what
the fold has to decide deterministically.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hypothesis import strategies as st

from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import (
    ClaimBody,
    Event,
    FailureBody,
    GoalBody,
    ProposalBody,
    RenewBody,
    ResultBody,
    Role,
    Subgoal,
    VoteBody,
)
from agents.core.fold import child_node_id
from agents.core.identity import Identity


@dataclass
class Universe:
    events: list[Event]
    quorum: int
    lease_ms: int
    scorers: frozenset[str]


class _Feed:
    """An author whose clock we set by hand before each event."""

    def __init__(self, name: str, role: Role) -> None:
        self.now = 0
        self.author = Author(Identity(hashlib.sha256(name.encode()).digest()), role, HybridClock(lambda: self.now))

    def at(self, ms: int, body: object) -> Event:
        self.now = ms
        return self.author.sign(body)


@st.composite
def universes(draw: st.DrawFn, max_scorers: int = 4) -> Universe:
    tag = draw(st.integers(0, 10**6))
    n_dec = draw(st.integers(1, 3))
    n_sco = draw(st.integers(1, max_scorers))
    n_exe = draw(st.integers(1, 3))
    quorum = draw(st.integers(1, n_sco))
    lease = draw(st.sampled_from([100, 200, 1000]))
    client = _Feed(f"{tag}/client", "client")
    decs = [_Feed(f"{tag}/d{i}", "decomposer") for i in range(n_dec)]
    scos = [_Feed(f"{tag}/s{i}", "scorer") for i in range(n_sco)]
    exes = [_Feed(f"{tag}/e{i}", "executor") for i in range(n_exe)]
    events: list[Event] = []
    goal = client.at(10, GoalBody(text=f"goal {tag}", quorum=quorum, max_depth=2, claim_lease_ms=lease))
    events.append(goal)

    def propose(feed: _Feed, node: str, ms: int) -> Event:
        count = draw(st.integers(2, 3))
        subs = tuple(
            Subgoal(title=f"{node[:4]} part {i} by {feed.author.peer_id[-4:]}",
                    executable=draw(st.booleans()))
            for i in range(count)
        )
        return feed.at(ms, ProposalBody(node=node, strategy="s", subgoals=subs))

    def vote_on(proposals: list[Event], lo: int, hi: int) -> None:
        for scorer in scos:
            picks = sorted(
                (draw(st.integers(lo, hi)), p.id) for p in proposals if draw(st.integers(0, 3)) > 0
            )
            for ms, pid in picks:
                body = VoteBody(proposal=pid, clarity=3, non_overlap=3, coverage=3,
                                approve=draw(st.integers(0, 3)) > 0)
                events.append(scorer.at(max(ms, scorer.now + 1), body))

    level1 = [propose(d, goal.id, draw(st.integers(11, 50))) for d in decs]
    events.extend(level1)
    vote_on(level1, 5, 200)

    children = [
        child_node_id(p.id, i) for p in level1 for i in range(len(p.body.subgoals))  # type: ignore[union-attr]
    ]
    level2 = []
    for d in decs:
        for node in children:
            if draw(st.integers(0, 2)) == 0:
                level2.append(propose(d, node, max(draw(st.integers(210, 260)), d.now + 1)))
    events.extend(level2)
    vote_on(level2, 200, 400)

    targets = children + [
        child_node_id(p.id, i) for p in level2 for i in range(len(p.body.subgoals))  # type: ignore[union-attr]
    ]
    for exe in exes:
        ms = draw(st.integers(150, 500))
        mine: list[Event] = []
        for _ in range(draw(st.integers(0, 6))):
            ms += draw(st.integers(1, 300))
            action = draw(st.integers(0, 9))
            if action < 4 or not mine:
                claim = exe.at(ms, ClaimBody(leaf=draw(st.sampled_from(targets))))
                mine.append(claim)
                events.append(claim)
                continue
            claim = draw(st.sampled_from(mine))
            leaf = claim.body.leaf  # type: ignore[union-attr]
            if action < 6:
                events.append(exe.at(ms, RenewBody(claim=claim.id)))
            elif action < 9:
                events.append(exe.at(ms, ResultBody(leaf=leaf, claim=claim.id, output=f"did {leaf[:6]}")))
            else:
                events.append(exe.at(ms, FailureBody(leaf=leaf, claim=claim.id, reason="gave up")))
    return Universe(events, quorum, lease, frozenset(s.author.peer_id for s in scos))

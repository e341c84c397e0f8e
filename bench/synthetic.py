"""A large, valid event log, generated directly (no model, no per-tick folds).

Each goal is split by one decomposer into ``branch`` subgoals per node down to
``depth``; two scorers (the roster, quorum 2) accept every split in round 1 (a
candidate by the round's coordinator and two ballots); executors claim every
leaf (two acks grant it) and finish it (a candidate and two ballots accept the
result). Every author is admitted by one bench authority. Timestamps increase
with every event, so every feed is a clean chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from agents.core.admission import issue
from agents.core.author import Author
from agents.core.clock import HybridClock, Timestamp
from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    Event,
    GoalBody,
    PromiseBody,
    ProposalBody,
    ResultBody,
    Role,
    Subgoal,
    VoteBody,
    sign_event,
)
from agents.core.fold import child_node_id
from agents.core.identity import Identity

CLUSTER = "bench"
AUTHORITY = Identity(hashlib.sha256(b"bench/authority").digest())


def _author(name: str, role: Role, clock: list[int]) -> Author:
    identity = Identity(hashlib.sha256(name.encode()).digest())
    return Author(identity, role, HybridClock(lambda: clock[0]), issue(AUTHORITY, CLUSTER, identity.peer_id, role).sig)


def plan_log(goals: int, branch: int = 6, depth: int = 5, executors: int = 4) -> Iterator[Event]:
    """Yield the events of ``goals`` fully executed plans (about 55k events each at 6 x 5)."""
    clock = [1_767_225_600_000]

    def sign(author: Author, body: object) -> Event:
        clock[0] += 1
        return author.sign(body)  # type: ignore[arg-type]

    decomposer = _author("bench/decomposer", "decomposer", clock)
    scorers = sorted((_author(f"bench/scorer{i}", "scorer", clock) for i in range(2)), key=lambda a: a.peer_id)
    roster = tuple(s.peer_id for s in scorers)
    workers = [_author(f"bench/executor{i}", "executor", clock) for i in range(executors)]

    def decide(node: str, value: str) -> Iterator[Event]:
        coordinator = scorers[(int(node[:8], 16)) % len(scorers)]  # round 1's coordinator
        candidate = sign(coordinator, CandidateBody(node=node, round=1, value=value))
        yield candidate
        for scorer in scorers:
            yield sign(scorer, BallotBody(node=node, round=1, candidate=candidate.id, approve=True))

    for g in range(goals):
        client = _author(f"bench/client{g}", "client", clock)
        goal = sign(client, GoalBody(text=f"benchmark goal {g}", scorers=roster, quorum=2, max_depth=depth,
                                     claim_lease_ms=600_000, hold_limit_ms=2_400_000, round_ms=30_000))
        yield goal
        level = [goal.id]
        for d in range(depth):
            next_level = []
            for node in level:
                subgoals = tuple(Subgoal(title=f"part {i} of {node[:6]}", executable=d + 1 == depth)
                                 for i in range(branch))
                proposal = sign(decomposer, ProposalBody(node=node, strategy="bench", subgoals=subgoals))
                yield proposal
                yield from decide(node, proposal.id)
                next_level.extend(child_node_id(proposal.id, i) for i in range(branch))
            level = next_level
        for i, leaf in enumerate(level):
            worker = workers[i % executors]
            claim = sign(worker, ClaimBody(leaf=leaf, epoch=1))
            yield claim
            for scorer in scorers:
                yield sign(scorer, AckBody(leaf=leaf, claim=claim.id, epoch=1))
            result = sign(worker, ResultBody(leaf=leaf, claim=claim.id, output=f"result {i}"))
            yield result
            yield from decide(leaf, result.id)


def equivocation(proposals: list[str], count: int) -> tuple[list[Event], list[Event]]:
    """An admitted scorer (not on any roster) whose feed forks at once: two events at seq 1,
    then ``count`` more on one branch, each a vote on one of ``proposals`` in turn. Returns the
    fork and the events after it."""
    clock = [1_767_225_600_000]
    scorer = _author("bench/equivocator", "scorer", clock)

    def vote(number: int) -> VoteBody:
        return VoteBody(proposal=proposals[number % len(proposals)], clarity=3, non_overlap=3, coverage=3,
                        approve=number % 2 == 0)

    first = scorer.sign(vote(0))
    clock[0] += 1
    other = sign_event(scorer.identity, "scorer", 1, None, Timestamp(clock[0], 0), vote(1), scorer.ticket)
    after = []
    for number in range(count):
        clock[0] += 1
        after.append(scorer.sign(vote(number)))
    return [first, other], after


def comb(events: int, forked: bool) -> list[Event]:
    """A goal whose roster is one admitted scorer, and ``events`` more by that scorer on the
    goal's root: promises into ever later rounds, and candidates. ``forked``: its feed forks at
    every seq (a comb: each event beside a second one at its seq, citing the same predecessor,
    the chain going on from the first), a shape one admitted key can sign at will; otherwise
    the same number of events on one chain."""
    clock = [1_767_225_600_000]
    client, scorer = _author("bench/comb client", "client", clock), _author("bench/comb scorer", "scorer", clock)
    made = client.sign(GoalBody(text="a comb", scorers=(scorer.peer_id,), quorum=1, max_depth=2,
                                claim_lease_ms=1000, hold_limit_ms=4000, round_ms=1000))
    out = [made]

    def body(number: int) -> PromiseBody | CandidateBody:
        round_ = 2 + number // 2 % 998
        if number % 2 == 0:
            return PromiseBody(node=made.id, round=round_)
        return CandidateBody(node=made.id, round=round_, value=made.id, promises=(made.id,))

    number = 0
    while len(out) <= events:
        clock[0] += 2
        seq, prev = scorer.seq, scorer.prev
        out.append(scorer.sign(body(number)))
        number += 1
        if forked and len(out) <= events:
            out.append(sign_event(scorer.identity, "scorer", seq + 1, prev, Timestamp(clock[0] + 1, 0),
                                  body(number), scorer.ticket))
            number += 1
    return out

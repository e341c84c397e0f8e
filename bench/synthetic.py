"""A large, valid event log, generated directly (no model, no per-tick folds).

Each goal is split by one decomposer into ``branch`` subgoals per node down to
``depth``; two scorers approve every split; executors claim and finish every
leaf. Timestamps increase with every event, so every feed is a clean chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import (
    ClaimBody,
    Event,
    GoalBody,
    ProposalBody,
    ResultBody,
    Role,
    Subgoal,
    VoteBody,
)
from agents.core.fold import child_node_id
from agents.core.identity import Identity


def _author(name: str, role: Role, clock: list[int]) -> Author:
    return Author(Identity(hashlib.sha256(name.encode()).digest()), role, HybridClock(lambda: clock[0]))


def plan_log(goals: int, branch: int = 6, depth: int = 5, executors: int = 4) -> Iterator[Event]:
    """Yield the events of ``goals`` fully executed plans (about 20k events each at 6 x 5)."""
    clock = [1_767_225_600_000]

    def sign(author: Author, body: object) -> Event:
        clock[0] += 1
        return author.sign(body)

    decomposer = _author("bench/decomposer", "decomposer", clock)
    scorers = [_author(f"bench/scorer{i}", "scorer", clock) for i in range(2)]
    workers = [_author(f"bench/executor{i}", "executor", clock) for i in range(executors)]
    for g in range(goals):
        client = _author(f"bench/client{g}", "client", clock)
        goal = sign(client, GoalBody(text=f"benchmark goal {g}", quorum=2, max_depth=depth,
                                     claim_lease_ms=600_000))
        yield goal
        level = [goal.id]
        for d in range(depth):
            next_level = []
            for node in level:
                subgoals = tuple(Subgoal(title=f"part {i} of {node[:6]}", executable=d + 1 == depth)
                                 for i in range(branch))
                proposal = sign(decomposer, ProposalBody(node=node, strategy="bench", subgoals=subgoals))
                yield proposal
                for scorer in scorers:
                    yield sign(scorer, VoteBody(proposal=proposal.id, clarity=4, non_overlap=4,
                                                coverage=4, approve=True))
                next_level.extend(child_node_id(proposal.id, i) for i in range(branch))
            level = next_level
        for i, leaf in enumerate(level):
            worker = workers[i % executors]
            claim = sign(worker, ClaimBody(leaf=leaf))
            yield claim
            yield sign(worker, ResultBody(leaf=leaf, claim=claim.id, output=f"result {i}"))

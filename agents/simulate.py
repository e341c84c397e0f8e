"""``swarm simulate``: every role in one process, no network, deterministic for a seed.

A discrete-time loop over a perfect network: every member sees every event at
the end of the tick it was published in. Members act on the tree folded at the
start of the tick, in a seeded order, so two executors can still race for one
leaf within a tick and the claim rule has something to decide. Model calls
take the backend's (seeded) latency in virtual time. Nothing reads the wall
clock: virtual time starts at a fixed epoch, and the same seed gives the same
events, byte for byte.

This is the quick way to see the roles and the fold at work; the networked
swarm (``swarm plan``) runs the same policies and the same fold.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import Event, GoalBody, Role
from agents.core.fold import fold
from agents.core.identity import Identity
from agents.core.transitions import revocations
from agents.core.tree import PlanTree
from agents.llm.base import Backend
from agents.llm.scripted import STRATEGIES
from agents.roles import POLICIES, Claim, Execute, Intent, Me, Renew
from agents.roles.compose import EventBody, compose, latency_key

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: virtual time starts here
log = structlog.get_logger("swarm.simulate")


@dataclass(frozen=True)
class SimulationConfig:
    goal: str
    decomposers: int = 3
    scorers: int = 3
    executors: int = 3
    quorum: int = 2
    max_depth: int = 3
    claim_lease_ms: int = 30_000
    seed: int = 0
    tick_ms: int = 100
    max_virtual_s: int = 3600

    def validate(self) -> None:
        if self.decomposers < 1 or self.scorers < 1 or self.executors < 1:
            raise ValueError("a simulation needs at least one decomposer, one scorer and one executor")
        if self.quorum > self.scorers:
            raise ValueError(
                f"quorum {self.quorum} can never be reached by {self.scorers} scorer(s); "
                "lower --quorum or add --scorers"
            )


@dataclass(frozen=True)
class SimulationResult:
    events: tuple[Event, ...]
    tree: PlanTree
    reorganisations: int
    virtual_ms: int
    model_calls: int


def identity_for(seed: int, role: str, index: int) -> Identity:
    """A member's key, derived from the seed: a replay signs the very same events."""
    return Identity(hashlib.sha256(f"swarm-sim/{seed}/{role}/{index}".encode()).digest())


@dataclass
class _Member:
    me: Me
    author: Author
    backend: Backend
    busy_until: int = 0
    pending: EventBody | None = None
    started: set[Intent] = field(default_factory=set)


def simulate(config: SimulationConfig, make_backend: Callable[[int], Backend]) -> SimulationResult:
    """Run the plan to completion (or ``max_virtual_s``). ``make_backend(i)`` gives member i its model."""
    config.validate()
    rng = random.Random(config.seed)
    now = EPOCH_MS

    def clock() -> HybridClock:
        return HybridClock(lambda: now)

    client = Author(identity_for(config.seed, "client", 0), "client", clock())
    goal_event = client.sign(
        GoalBody(text=config.goal, quorum=config.quorum, max_depth=config.max_depth,
                 claim_lease_ms=config.claim_lease_ms)
    )
    members: list[_Member] = []
    shape: list[tuple[Role, int]] = [
        ("decomposer", config.decomposers), ("scorer", config.scorers), ("executor", config.executors)
    ]
    for role, count in shape:
        for i in range(count):
            author = Author(identity_for(config.seed, role, i), role, clock())
            me = Me(author.peer_id, role, STRATEGIES[i % len(STRATEGIES)])
            members.append(_Member(me, author, make_backend(len(members))))

    events: list[Event] = [goal_event]
    tree = fold(events)
    reorgs = 0
    calls = 0
    deadline = EPOCH_MS + config.max_virtual_s * 1000
    while not tree.complete and now < deadline:
        new: list[Event] = []
        for member in rng.sample(members, len(members)):
            if member.pending is not None:
                if now < member.busy_until:
                    continue
                new.append(member.author.sign(member.pending))
                member.pending = None
            for intent in POLICIES[member.me.role](tree, member.me, member.author.clock.peek().ms):
                if intent in member.started:
                    continue
                if not isinstance(intent, (Claim, Renew)):  # claims and renewals may recur
                    member.started.add(intent)
                body = compose(intent, tree, member.backend, member.me)
                if body is None:
                    continue
                kind, key = latency_key(intent)
                delay_ms = 0  # claims and renewals ask no model: they go out at once
                if kind != "none":
                    calls += 1
                    delay_ms = int(member.backend.latency_s(kind, key) * 1000)
                if delay_ms > 0:
                    member.pending, member.busy_until = body, now + delay_ms
                else:
                    new.append(member.author.sign(body))
                if delay_ms > 0 or isinstance(intent, Execute):
                    break  # one model call at a time
        for event in new:
            for member in members:
                member.author.clock.observe(event.ts)
        if new:
            events.extend(new)
            folded = fold(events)
            changed = [t.node for t in revocations(tree, folded)]
            if changed:
                reorgs += len(changed)
                log.info("reorganisation", nodes=[n[:10] for n in changed])
            tree = folded
        now += config.tick_ms
    return SimulationResult(tuple(events), tree, reorgs, now - EPOCH_MS, calls)

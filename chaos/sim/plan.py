"""One plan, simulated with no faults: what ``swarm simulate`` shows.

It is the seeded simulation (``chaos.sim.world``) with every fault switched off
and one observer: the same members, roles, fold, store and sync protocol, on
virtual time, deterministic for a seed. There is one simulation driver; this
is its quiet front.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.core.events import Event
from agents.core.fold import fold
from agents.core.tree import PlanTree
from chaos.checkers.finality import revocations
from chaos.sim.world import SimConfig, run_seed


@dataclass(frozen=True)
class SimulatedPlan:
    events: tuple[Event, ...]  # every event any member held, in a stable order
    tree: PlanTree
    revocations: int
    virtual_seconds: float
    model_calls: int


def simulate_plan(config: SimConfig) -> SimulatedPlan:
    """Run ``config`` with no faults and return the plan the members agreed on."""
    if config.faults:
        raise ValueError("simulate_plan runs without faults; use swarm sim for faults")
    run = run_seed(config)
    union = {e.id: e for m in run.history.members.values() for e in m.events}
    events = tuple(sorted(union.values(), key=lambda e: (e.order_key, e.seq)))
    return SimulatedPlan(events, fold(events), revocations(run.history), run.history.ended_at,
                         sum(m.model_calls for m in run.history.members.values()))

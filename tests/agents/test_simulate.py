"""``swarm simulate``'s engine: the seeded simulation with no faults, one plan per seed."""

from __future__ import annotations

import pytest

from agents.core.events import ResultBody
from agents.core.fold import fold
from chaos.sim.plan import simulate_plan
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig
from tests.spans import most_leaves_worked_at_once


def _run(**overrides):
    quiet_logs()
    return simulate_plan(SimConfig(goal="Plan a two-week trip to Japan", model_latency_s=1.0, **overrides))


def test_the_same_seed_gives_the_same_events_byte_for_byte() -> None:
    first, second = _run(seed=11), _run(seed=11)
    assert [e.to_wire() for e in first.events] == [e.to_wire() for e in second.events]
    assert _run(seed=12).tree.digest != first.tree.digest


@pytest.mark.parametrize(("d", "s", "e", "q"), [(1, 1, 1, 1), (3, 3, 3, 2), (3, 3, 3, 3), (2, 5, 4, 3)])
def test_plans_complete_for_several_cluster_shapes(d, s, e, q) -> None:
    result = _run(decomposers=d, scorers=s, executors=e, quorum=q, seed=q)
    tree = result.tree
    assert tree.complete and result.revocations == 0
    assert all(len(tree.proposals[n.split].ballots) >= q for n in tree.nodes.values() if n.split)
    assert fold(result.events).digest == tree.digest


def test_faults_are_refused_here() -> None:
    with pytest.raises(ValueError, match="without faults"):
        simulate_plan(SimConfig(seed=1, faults=frozenset({"loss"})))


def test_an_executor_with_two_calls_at_once_works_two_leaves_together_and_the_plan_ends_sooner() -> None:
    # one executor, and a one-level plan whose leaves are all free together. The scripted model
    # takes as long for two calls as for one (no batch slows it), so "sooner" shows the policy
    # uses the second slot, not what a real batched server gains (bench.model measures that)
    one, two = (_run(seed=4, executors=1, max_depth=1, parallel=p) for p in (1, 2))
    assert one.tree.complete and two.tree.complete and two.revocations == 0
    assert len(list(two.tree.leaves())) >= 3
    assert most_leaves_worked_at_once(one.events) == 1
    assert most_leaves_worked_at_once(two.events) == 2
    assert _last_result_ms(two.events) < _last_result_ms(one.events)


def _last_result_ms(events) -> int:
    """When the last result was signed, from the goal, by the events' clock."""
    start = min(e.ts.ms for e in events)
    return max(e.ts.ms for e in events if isinstance(e.body, ResultBody)) - start

from __future__ import annotations

import pytest

from agents.core.fold import fold
from agents.llm.scripted import ScriptedBackend
from agents.simulate import SimulationConfig, simulate


def _run(**overrides):
    config = SimulationConfig(goal="Plan a two-week trip to Japan", **overrides)
    return simulate(config, lambda i: ScriptedBackend(seed=config.seed * 1000 + i, latency=1.0))


def test_the_same_seed_gives_the_same_events_byte_for_byte() -> None:
    first, second = _run(seed=11), _run(seed=11)
    assert [e.to_wire() for e in first.events] == [e.to_wire() for e in second.events]
    assert _run(seed=12).tree.digest != first.tree.digest


@pytest.mark.parametrize(("d", "s", "e", "q"), [(1, 1, 1, 1), (3, 3, 3, 2), (3, 3, 3, 3), (2, 5, 4, 3)])
def test_plans_complete_for_several_cluster_shapes(d, s, e, q) -> None:
    result = _run(decomposers=d, scorers=s, executors=e, quorum=q, seed=q)
    tree = result.tree
    assert tree.complete
    assert all(len(tree.proposals[n.split].approvals) >= q for n in tree.nodes.values() if n.split)
    assert fold(result.events).digest == tree.digest


def test_an_impossible_quorum_is_refused_before_running() -> None:
    with pytest.raises(ValueError, match="quorum 3 can never be reached by 2 scorer"):
        _run(scorers=2, quorum=3)

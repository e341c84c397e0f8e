"""The fold's invariants over adversarial event sets (``tests.eventgen``).

* convergence: the same set in any order, with any duplicates, folds to the same tree and digest;
* finality: with at most ``f = 2q - n - 1`` equivocating scorers, every split and result shown by
  any prefix of any delivery order is the one the whole set shows (nothing is ever taken back or
  replaced), and no node or leaf ever has two;
* the fold agrees with the reference model (``chaos.checkers.reference``), written separately
  from PROTOCOL.md, on whole sets and on prefixes.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core.fold import fold
from agents.core.transitions import decisions
from chaos.checkers.reference import Model
from tests.eventgen import Universe, universes

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EVERY_PREFIX = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _final(tree) -> dict[tuple[str, str], str]:
    return {k: v for k, v in decisions(tree).items() if k[0] in ("split", "result")}


@PROPERTY
@given(universes(), st.randoms(use_true_random=False), st.data())
def test_same_set_any_order_any_duplicates_same_tree_and_digest(universe: Universe, rnd, data) -> None:
    reference = fold(universe.events)
    shuffled = list(universe.events)
    rnd.shuffle(shuffled)
    duplicates = data.draw(st.lists(st.sampled_from(universe.events), max_size=20))
    again = fold(shuffled + duplicates)
    assert again.digest == reference.digest
    assert again.nodes == reference.nodes
    assert again.rounds == reference.rounds
    assert again.claims == reference.claims and again.results == reference.results


@EVERY_PREFIX
@given(universes(), st.randoms(use_true_random=False))
def test_every_prefix_of_a_delivery_order_shows_only_final_decisions(universe: Universe, rnd) -> None:
    order = list(universe.events)
    rnd.shuffle(order)
    final = _final(fold(order))
    if not universe.within_tolerance:
        return
    for cut in range(1, len(order)):
        shown = _final(fold(order[:cut]))
        for key, value in shown.items():
            assert final.get(key) == value, (
                f"after {cut} of {len(order)} events a member shows {key[0]} {value[:8]} of {key[1][:8]}, "
                f"the whole set {str(final.get(key))[:8]}")


@PROPERTY
@given(universes())
def test_one_split_per_node_and_one_result_per_leaf(universe: Universe) -> None:
    tree = fold(universe.events)
    breaches = [i for i in tree.issues if i.rule == "breach"]
    if universe.within_tolerance:
        assert not breaches, breaches
    accepted = [p for p in tree.proposals.values() if p.status == "accepted"]
    assert len({p.node for p in accepted}) == len(accepted)
    for proposal in accepted:
        assert set(proposal.ballots) <= set(universe.roster) and len(proposal.ballots) >= universe.quorum
        assert tree.nodes[proposal.node].split == proposal.id
    for node in tree.nodes.values():
        if node.result is not None:
            result = tree.results[node.result]
            assert result.status == "accepted" and len(result.ballots) >= universe.quorum
            assert tree.claims[result.claim].granted and tree.claims[result.claim].executor == result.executor
            assert sum(1 for r in tree.results.values() if r.leaf == node.id and r.status == "accepted") == 1


@PROPERTY
@given(universes(), st.randoms(use_true_random=False), st.integers(0, 100))
def test_the_fold_agrees_with_the_reference_model(universe: Universe, rnd, percent: int) -> None:
    order = list(universe.events)
    rnd.shuffle(order)
    _agree(order)
    _agree(order[: max(1, len(order) * percent // 100)])


def _agree(events) -> None:
    tree, model = fold(events), Model(events)
    assert set(tree.nodes) == set(model.nodes)
    for node_id, expected in model.nodes.items():
        node = tree.nodes[node_id]
        assert node.split == expected.split, node_id
        assert node.result == expected.result, node_id
        if node.result is None:
            assert (node.claim if node.status == "claimed" else None) == expected.holder, node_id
    for (node_id, round_), view in tree.rounds.items():
        value, yes, no = model.tally(node_id, round_)
        assert (view.value, set(view.approvals), set(view.rejections)) == (value, yes, no), (node_id, round_)
    assert tree.complete == model.complete
    assert tree.equivocators == model.equivocators()


def test_the_generator_produces_decisions_and_equivocations() -> None:
    """A property over universes that never accept anything would prove nothing."""
    seen = {"split": 0, "result": 0, "forks": 0, "rounds>1": 0, "branches go on": 0}

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(universes())
    def count(universe: Universe) -> None:
        tree = fold(universe.events)
        seen["split"] += any(n.split for n in tree.nodes.values())
        seen["result"] += any(n.result for n in tree.nodes.values())
        seen["forks"] += bool(universe.equivocators)
        seen["rounds>1"] += any(n.split_round and n.split_round > 1 for n in tree.nodes.values())
        cited = Counter(e.prev for e in universe.events if e.prev is not None)
        siblings = Counter((e.author, e.prev) for e in universe.events if cited[e.id])
        seen["branches go on"] += any(n > 1 for n in siblings.values())  # two branches of a fork, both signed on

    count()
    assert all(v >= 10 for v in seen.values()), seen

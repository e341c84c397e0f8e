"""The core invariant and the safety rules of the fold, over adversarial event sets."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core.events import ResultBody
from agents.core.fold import fold
from tests.eventgen import Universe, universes

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
    assert again.proposals == reference.proposals
    assert again.claims == reference.claims


@PROPERTY
@given(universes(), st.randoms(use_true_random=False), st.data())
def test_any_subset_folds_the_same_in_any_order(universe: Universe, rnd, data) -> None:
    # Members mid-sync hold arbitrary subsets; two members with the same subset must agree.
    subset = data.draw(st.lists(st.sampled_from(universe.events), unique_by=lambda e: e.id))
    other = list(reversed(subset))
    rnd.shuffle(other)
    assert fold(subset).digest == fold(other).digest


@PROPERTY
@given(universes())
def test_no_split_is_accepted_without_quorum_distinct_scorers(universe: Universe) -> None:
    tree = fold(universe.events)
    events = {e.id: e for e in universe.events}
    for node in tree.nodes.values():
        if node.split is None:
            continue
        proposal = tree.proposals[node.split]
        assert proposal.status == "accepted"
        assert len(set(proposal.approvals)) == len(proposal.approvals) >= universe.quorum
        assert set(proposal.approvals) <= universe.scorers
        # each counted approval is that scorer's earliest vote on the proposal, and approves
        for scorer in proposal.approvals:
            votes = sorted(
                (e for e in universe.events if e.kind == "vote" and e.author == scorer
                 and e.body.proposal == proposal.id and e.ts > events[proposal.id].ts),
                key=lambda e: e.order_key,
            )
            assert votes and votes[0].body.approve
    accepted_per_node = Counter(p.node for p in tree.proposals.values() if p.status == "accepted")
    assert all(count == 1 for count in accepted_per_node.values())


@PROPERTY
@given(universes())
def test_never_two_accepted_results_for_a_leaf(universe: Universe) -> None:
    tree = fold(universe.events)
    events = {e.id: e for e in universe.events}
    won = Counter(c.leaf for c in tree.claims.values() if c.status == "won")
    assert all(count == 1 for count in won.values())
    for node in tree.nodes.values():
        if node.result is None:
            assert node.status != "done" or not node.leaf
            continue
        result = events[node.result]
        assert isinstance(result.body, ResultBody)
        claim = tree.claims[result.body.claim]
        assert claim.status == "won" and claim.leaf == node.id
        assert result.author == claim.executor == node.executor
        assert claim.lease_until is not None and result.ts < claim.lease_until


@PROPERTY
@given(universes())
def test_a_leaf_changes_hands_only_after_the_lease_ends(universe: Universe) -> None:
    tree = fold(universe.events)
    by_leaf: dict[str, list] = {}
    for claim in tree.claims.values():
        by_leaf.setdefault(claim.leaf, []).append(claim)
    for claims in by_leaf.values():
        holders = sorted((c for c in claims if c.status != "lost"), key=lambda c: (c.at, c.executor, c.id))
        for before, after in itertools.pairwise(holders):
            assert before.status in ("lapsed", "failed")
            assert before.lease_until is not None and after.at >= before.lease_until
        for lost in (c for c in claims if c.status == "lost"):
            # a lost claim was made while some holder's lease ran, or after the leaf was done
            assert any(h.at <= lost.at for h in holders)

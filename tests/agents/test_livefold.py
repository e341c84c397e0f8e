"""``LiveFold`` against ``fold`` from scratch: the same tree, digest included, after every batch
of any delivery order of adversarial event sets (``tests.eventgen``: forks, broken links,
sybil scorers, equivocating rosters), with duplicates; and honest sets really are folded as
changes, not from scratch, so the comparison tests the change path."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core import livefold
from agents.core.clock import Timestamp
from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    Event,
    FailureBody,
    PromiseBody,
    ProposalBody,
    RenewBody,
    Subgoal,
    VoteBody,
    sign_event,
)
from agents.core.feeds import build_feeds
from agents.core.fold import child_node_id
from agents.core.livefold import LiveFold
from agents.core.tree import PlanTree, compute_digest
from bench.synthetic import plan_log
from tests.builders import Feed, goal, identity, ticket_sig
from tests.eventgen import Universe, universes

BATCHES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


WALKED = ("nodes", "proposals", "rounds", "entered", "claims", "results", "acked", "promises", "certificates")


def same(tree: PlanTree, expected: PlanTree) -> bool:
    """Equal, and the maps a reader iterates list their entries in the same order (the order
    ``fold`` walks the nodes in: what a member does next must not depend on arrival order)."""
    return tree == expected and all(list(getattr(tree, m)) == list(getattr(expected, m)) for m in WALKED)


def from_scratch(events) -> PlanTree:
    """A fresh ``LiveFold`` folds its first tree from scratch, and its digest is recomputed
    here the way ``compute_digest`` encodes a whole tree, not from records kept encoded."""
    tree = LiveFold(events).tree()
    assert compute_digest(tree, (e.id for e in build_feeds(events).accepted)) == tree.digest
    return tree


def _more(draw: st.DrawFn, universe: Universe) -> list[Event]:
    """Events the universes do not make, on their own authors' chains: votes (by the roster and
    by a sybil scorer), renewals and failures (of one's own claim, or another's), a proposal
    on a leaf, and cross-node citations, which a node settles from events it does not hold
    on it: a ballot naming another node's candidate, a candidate naming another node's
    proposal or citing another node's promises, followed by promises that report them."""
    by_kind: dict[str, list[Event]] = {}
    for event in universe.events:
        by_kind.setdefault(event.kind, []).append(event)
    feeds = universe.feeds
    role = {peer: feed.author.role for peer, feed in feeds.items()}
    scorers = [feeds[p] for p in universe.roster] + [Feed(f"sybil {universe.roster[0]}", "scorer")]
    executors = [f for p, f in feeds.items() if role[p] == "executor"]
    decomposers = [f for p, f in feeds.items() if role[p] == "decomposer"]
    nodes = sorted({e.body.node for e in universe.events if e.kind in ("proposal", "candidate", "ballot")}
                   | {universe.events[0].id})  # the goal's root
    at = max(e.hlc[0] for e in universe.events)
    more: list[Event] = []
    for _ in range(draw(st.integers(0, 14))):
        at += 1
        what = draw(st.sampled_from(["vote", "renew", "failure", "proposal on a leaf", "ballot elsewhere",
                                     "candidate elsewhere", "promise"]))
        scorer = draw(st.sampled_from(scorers))
        if what == "vote" and "proposal" in by_kind:
            proposal = draw(st.sampled_from(by_kind["proposal"]))
            more.append(scorer.at(at, VoteBody(proposal=proposal.id, clarity=draw(st.integers(1, 5)), non_overlap=3,
                                               coverage=4, approve=draw(st.booleans()))))
        elif what in ("renew", "failure") and "claim" in by_kind:
            claim = draw(st.sampled_from(by_kind["claim"]))
            executor = feeds[claim.author] if draw(st.integers(0, 3)) else draw(st.sampled_from(executors))
            body = (RenewBody(claim=claim.id) if what == "renew"
                    else FailureBody(leaf=claim.body.leaf, claim=claim.id, reason="stuck"))  # type: ignore[union-attr]
            more.append(executor.at(at, body))
        elif what == "proposal on a leaf" and "claim" in by_kind and decomposers:
            leaf = draw(st.sampled_from(by_kind["claim"])).body.leaf  # type: ignore[union-attr]
            more.append(draw(st.sampled_from(decomposers)).at(at, ProposalBody(
                node=leaf, strategy="s", subgoals=(Subgoal(title="x", executable=True),
                                                   Subgoal(title="y", executable=True)))))
        elif what == "ballot elsewhere" and "candidate" in by_kind:
            candidate = draw(st.sampled_from(by_kind["candidate"]))
            more.append(scorer.at(at, BallotBody(node=draw(st.sampled_from(nodes)), round=candidate.body.round,  # type: ignore[union-attr]
                                                 candidate=candidate.id, approve=True)))
        elif what == "candidate elsewhere" and "proposal" in by_kind:
            promises = [p.id for p in by_kind.get("promise", [])][:draw(st.integers(0, 3))]
            more.append(scorer.at(at, CandidateBody(node=draw(st.sampled_from(nodes)), round=2 if promises else 1,
                                                    value=draw(st.sampled_from(by_kind["proposal"])).id,
                                                    promises=tuple(promises))))
        elif what == "promise":
            more.append(scorer.at(at, PromiseBody(node=draw(st.sampled_from(nodes)), round=draw(st.integers(2, 5)))))
    return more + _broken(draw, universe, nodes, at)


def _broken(draw: st.DrawFn, universe: Universe, nodes: list[str], at: int) -> list[Event]:
    """A decomposer whose feed breaks as ``build_feeds`` tells: seqs 1-2, then a link that
    skips a seq, a second seq 1 (in its role, or in another it holds a ticket for too), a
    clock that goes back or a role that changes; and sometimes
    one more event after it. (A first event citing one, or a later one citing none, is
    refused before it is stored: ``check_envelope``.)"""
    me = identity(f"broken {universe.roster[0]}")

    def signed(seq: int, prev: str | None, ms: int, role: str = "decomposer") -> Event:
        body = (ProposalBody(node=draw(st.sampled_from(nodes)), strategy="s", subgoals=(
            Subgoal(title=f"b{seq}", executable=True), Subgoal(title="c", executable=True)))
            if role == "decomposer" else PromiseBody(node=nodes[0], round=2))
        return sign_event(me, role, seq, prev, Timestamp(ms, 0), body, ticket_sig(me.peer_id, role))  # type: ignore[arg-type]

    first = signed(1, None, at + 1)
    second = signed(2, first.id, at + 2)
    how = draw(st.sampled_from(["skip", "second first", "first in another role", "clock", "role"]))
    odd = {"skip": lambda: signed(4, second.id, at + 4), "second first": lambda: signed(1, None, at + 3),
           "first in another role": lambda: signed(1, None, at + 3, "scorer"),  # admitted twice
           "clock": lambda: signed(3, second.id, at), "role": lambda: signed(3, second.id, at + 3, "scorer")}[how]()
    events = [first, second, odd]
    if draw(st.booleans()):
        events.append(signed(odd.seq + 1, odd.id, at + 9, odd.role))
    return events


@BATCHES
@given(universes(), st.randoms(use_true_random=False), st.data())
def test_every_batch_of_any_order_folds_as_the_whole_set_does(universe: Universe, rnd, data) -> None:
    order = list(universe.events) + _more(data.draw, universe)
    rnd.shuffle(order)
    order += data.draw(st.lists(st.sampled_from(universe.events), max_size=10))  # duplicates
    live = LiveFold()
    shown: list[tuple[PlanTree, PlanTree]] = []
    at = 0
    while at < len(order):
        size = data.draw(st.integers(1, 8))
        live.add(order[at:at + size])
        at += size
        if at >= len(order) or data.draw(st.booleans()):  # or the next tree folds two batches as one
            tree = live.tree()
            expected = from_scratch(order[:at])
            assert same(tree, expected), f"after {at} of {len(order)} events"
            shown.append((tree, expected))
    assert live.tree() is tree  # nothing new: the same tree, not folded again
    for number, (tree, expected) in enumerate(shown):  # no later change touched a tree handed out
        assert same(tree, expected), f"tree {number + 1} of {len(shown)} changed after it was handed out"



def test_honest_plans_gossiped_in_any_order_are_folded_as_changes() -> None:
    """Two whole executed plans (bench.synthetic: 2 x 2 splits, every leaf claimed and done),
    delivered one event or a few at a time in a shuffled order, so that many arrive before
    their predecessors and wait, and the goals come whenever they come: after the first fold
    (of nothing), every batch is a change, each equal to the whole set's fold."""
    log = list(plan_log(2, branch=2, depth=2, executors=2))
    rnd = random.Random(7)
    order = rnd.sample(log, len(log))
    live = LiveFold()
    live.tree()
    at = batches = 0
    while at < len(order):
        size = rnd.choice((1, 1, 2, 5))
        live.add(order[at:at + size])
        at += size
        batches += 1
        assert same(live.tree(), from_scratch(order[:at])), f"after {at} of {len(order)} events"
    assert (live.scratch_folds, live.changes) == (1, batches)
    assert live.tree().complete and live.tree().pending == 0 and len(live.tree().goals) == 2


def _delivered(*batches: list[Event]) -> LiveFold:
    """A ``LiveFold`` given ``batches`` one after another, checked against a fold of the events
    so far after each."""
    live, so_far = LiveFold(), []
    for number, batch in enumerate(batches, start=1):
        live.add(batch)
        so_far += batch
        assert same(live.tree(), from_scratch(so_far)), f"after batch {number} of {len(batches)}"
    return live


def _plan() -> tuple[Event, Feed, Feed, Feed]:
    """A goal with one scorer (quorum 1), its decomposer and executor."""
    client, scorer = Feed("live/client", "client"), Feed("live/scorer", "scorer")
    return (client.at(1, goal("live", [scorer.peer_id], 1, max_depth=1)), scorer,
            Feed("live/decomposer", "decomposer"), Feed("live/executor", "executor"))


def test_a_fork_between_waiting_events_is_seen_once_both_its_events_are_held() -> None:
    """Seq 4 forked (4a, 4b) and seq 5 citing 4a: with 3 and 4a missing, 4b and 5 wait and
    prove nothing (4a might have been at another seq); once 4a comes, two events at seq 4 do."""
    root, scorer, _, _ = _plan()
    mine = [scorer.at(10 + r, PromiseBody(node=root.id, round=r)) for r in range(2, 5)]  # seqs 1-3
    fourth = scorer.at(20, PromiseBody(node=root.id, round=6))
    forked = scorer.fork(21, PromiseBody(node=root.id, round=7))
    fifth = scorer.at(22, PromiseBody(node=root.id, round=8))
    live = _delivered([root, *mine[:2]], [forked, fifth], [mine[2]], [fourth])
    assert live.tree().equivocators == {scorer.peer_id}


def test_an_event_citing_one_not_held_lists_nobody_as_an_equivocator() -> None:
    """A cut feed (a link back in time at seq 3), then an event at seq 4 citing one not held:
    a guess at a fork would list its author, and the cited event, at seq 7, would show it was
    a broken link. A member that got the events in that order listed the author for good,
    one folding them at once did not."""
    root, _, decomposer, _ = _plan()
    who, ticket = decomposer.author.identity, ticket_sig(decomposer.peer_id, "decomposer")
    body = ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True)))
    first = sign_event(who, "decomposer", 1, None, Timestamp(10, 0), body, ticket)
    second = sign_event(who, "decomposer", 2, first.id, Timestamp(11, 0), body, ticket)
    back = sign_event(who, "decomposer", 3, second.id, Timestamp(9, 0), body, ticket)
    far = sign_event(who, "decomposer", 7, "ef" * 32, Timestamp(30, 0), body, ticket)
    on_far = sign_event(who, "decomposer", 4, far.id, Timestamp(20, 0), body, ticket)
    live = _delivered([root, first, second, back], [on_far], [far])
    assert not live.tree().equivocators


def test_an_event_waiting_on_one_never_sent_is_a_change_and_so_is_every_batch_after_it() -> None:
    """After its feed's head, an event citing an id nobody holds: no fork (it proves nothing),
    no cut, but the author's chain cannot grow past it. Its feed is kept as any shape from then
    on: neither that batch nor any later one of the author's folds the whole set again."""
    root, _, decomposer, _ = _plan()
    body = ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True)))
    first = decomposer.at(10, body)
    who, ticket = decomposer.author.identity, ticket_sig(decomposer.peer_id, "decomposer")
    stray = sign_event(who, "decomposer", 2, "ab" * 32, Timestamp(20, 0), body, ticket)
    later = [sign_event(who, "decomposer", 100 + n, "cd" * 32, Timestamp(30 + n, 0), body, ticket) for n in range(4)]
    live = _delivered([root, first], [stray], *([e] for e in later))
    assert (live.scratch_folds, live.changes) == (1, 5)


def test_a_link_that_goes_back_in_time_is_cut_when_it_comes() -> None:
    root, _, decomposer, _ = _plan()
    first = decomposer.at(10, ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))))
    back = sign_event(decomposer.author.identity, "decomposer", 2, first.id, Timestamp(5, 0), first.body,
                      ticket_sig(decomposer.peer_id, "decomposer"))
    live = _delivered([root, first], [back])
    assert [i.rule for i in live.tree().issues] == ["clock"]


def test_a_node_settles_again_when_an_event_it_cites_on_another_node_comes() -> None:
    """A ballot on the root names a candidate on another node, and a promise reports it:
    undetermined until that candidate comes, then invalid (a candidate of another node), so
    the promise is determined, though nothing on the root came."""
    root, scorer, _, _ = _plan()
    elsewhere = Feed("live/other scorer", "scorer").at(5, CandidateBody(node="cd" * 32, round=1, value="ef" * 32))
    ballot = scorer.at(10, BallotBody(node=root.id, round=1, candidate=elsewhere.id, approve=True))
    promise = scorer.at(11, PromiseBody(node=root.id, round=2))
    live = _delivered([root, ballot, promise], [elsewhere])
    (view,) = live.tree().promises[(root.id, 2)]
    assert view.determined and view.report_round is None


def test_a_holders_renewal_moves_its_heartbeat() -> None:
    root, scorer, decomposer, executor = _plan()
    split = decomposer.at(2, ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))))
    candidate = scorer.at(3, CandidateBody(node=root.id, round=1, value=split.id))
    ballot = scorer.at(4, BallotBody(node=root.id, round=1, candidate=candidate.id, approve=True))
    leaf = child_node_id(split.id, 0)
    claim = executor.at(5, ClaimBody(leaf=leaf, epoch=1))
    ack = scorer.at(6, AckBody(leaf=leaf, claim=claim.id, epoch=1))
    renewal = executor.at(50, RenewBody(claim=claim.id))
    vote = scorer.at(60, VoteBody(proposal=split.id, clarity=4, non_overlap=4, coverage=4, approve=True))
    live = _delivered([root, split, candidate, ballot, claim, ack], [renewal], [vote])
    tree = live.tree()
    assert tree.nodes[leaf].status == "claimed" and tree.nodes[leaf].heartbeat == renewal.ts
    assert tree.proposals[split.id].approvals == (scorer.peer_id,)
    assert live.scratch_folds == 1, "the renewal and the vote are changes"


def test_a_fork_a_cut_and_all_their_authors_sign_after_them_are_changes_not_whole_folds() -> None:
    """A fork, a broken link, and what their authors sign next, on any branch, are applied as
    changes, each tree equal to the whole set's fold: an admitted key that forks costs a member
    its own events, not a fold of everything (at 100k events, seconds of a member's event loop
    per key that forks, and per batch after it before). A cut author that then forks becomes an
    equivocator; each chain is read once, as a fold from scratch reads it, however many
    batches came."""
    root, scorer, decomposer, _ = _plan()
    split = decomposer.at(2, ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))))
    elsewhere = "ab" * 32  # a node nobody split to: the fork is on it
    first = scorer.at(3, PromiseBody(node=elsewhere, round=2))
    forked = scorer.fork(4, PromiseBody(node=elsewhere, round=3))
    candidate = scorer.at(5, CandidateBody(node=root.id, round=1, value=split.id))  # after ``first``
    ballot = scorer.at(6, BallotBody(node=root.id, round=1, candidate=candidate.id, approve=True))
    me, tickets = scorer.author.identity, ticket_sig(scorer.peer_id, "scorer")
    other_branch = sign_event(me, "scorer", 2, forked.id, Timestamp(7, 0),
                              BallotBody(node=root.id, round=1, candidate=candidate.id, approve=False), tickets)
    cut = Feed("live/cut decomposer", "decomposer")
    cut_first = cut.at(10, ProposalBody(node=elsewhere, strategy="s", subgoals=split.body.subgoals))
    who, cut_ticket = cut.author.identity, ticket_sig(cut.peer_id, "decomposer")
    back = sign_event(who, "decomposer", 2, cut_first.id, Timestamp(5, 0), cut_first.body, cut_ticket)
    second_two = sign_event(who, "decomposer", 2, cut_first.id, Timestamp(20, 0), split.body, cut_ticket)
    after_it = sign_event(who, "decomposer", 3, second_two.id, Timestamp(21, 0), split.body, cut_ticket)
    live = _delivered([root, split, first], [forked], [cut_first, back],  # a fork, a cut
                      [candidate, ballot], [other_branch, after_it], [second_two])  # on them (one waits)
    assert (live.scratch_folds, live.changes) == (1, 5)
    tree = live.tree()
    assert tree.nodes[root.id].split == split.id  # the ballot after the fork decided the root
    assert tree.equivocators == {scorer.peer_id, cut.peer_id}
    assert [i.rule for i in tree.issues if i.author == cut.peer_id] == ["clock", "fork"]
    whole = LiveFold(live._events.values())
    whole.tree()
    assert live._index.scorer_chains == whole._index.scorer_chains
    assert live._index.draft_number == whole._index.draft_number
    assert live._index.first_candidates == whole._index.first_candidates


def test_a_peer_with_two_roles_shows_the_role_of_its_last_event_in_its_feed() -> None:
    """A peer admitted under two tickets starts two feeds' worth of events at seq 1, one per
    role (a fork): however its later events come, ``members`` shows the role of its last event
    in (seq, id) order, as a fold from scratch counts them, not that of the last to arrive."""
    root, _, _, _ = _plan()
    both = Feed("live/two tickets", "scorer")
    scorer_feed = [both.at(10 + i, PromiseBody(node=root.id, round=2 + i)) for i in range(3)]  # seqs 1-3
    me = both.author.identity
    as_decomposer = ticket_sig(both.peer_id, "decomposer")
    body = ProposalBody(node=root.id, strategy="s", subgoals=(Subgoal(title="a", executable=True),
                                                              Subgoal(title="b", executable=True)))
    first = sign_event(me, "decomposer", 1, None, Timestamp(20, 0), body, as_decomposer)
    second = sign_event(me, "decomposer", 2, first.id, Timestamp(21, 0), body, as_decomposer)
    live = _delivered([root, *scorer_feed, first], [second])  # ``same`` compares ``members`` too
    assert live.tree().members[both.peer_id][0] == "scorer" and live.changes == 1


def test_a_fold_that_fails_half_way_is_folded_from_scratch_next_time(monkeypatch) -> None:
    """An exception in the middle of a change (here: settling a node) reaches the caller, and
    the next tree is the whole set's fold, not the half-changed state."""
    root, scorer, decomposer, _ = _plan()
    split = decomposer.at(2, ProposalBody(node=root.id, strategy="s", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))))
    candidate = scorer.at(3, CandidateBody(node=root.id, round=1, value=split.id))
    ballot = scorer.at(4, BallotBody(node=root.id, round=1, candidate=candidate.id, approve=True))
    live = LiveFold([root, split])
    live.tree()
    honest = livefold.settle_node

    def failing(*args, **kwargs):
        monkeypatch.setattr(livefold, "settle_node", honest)
        raise MemoryError("half-way")

    monkeypatch.setattr(livefold, "settle_node", failing)
    live.add([candidate, ballot])
    with pytest.raises(MemoryError):
        live.tree()
    assert same(live.tree(), from_scratch([root, split, candidate, ballot]))
    assert live.tree().nodes[root.id].split == split.id and live.scratch_folds == 2


def test_a_trees_digest_is_hashed_when_read_and_is_its_own_whatever_came_after() -> None:
    """A tree's digest is hashed when first read (most trees a member folds are never shown
    with one), from what the fold held when it made the tree: events and changes folded after
    it leave it alone, however late it is read. What it hashed is let go once it is."""
    log = list(plan_log(1, branch=2, depth=2, executors=2))
    half = len(log) // 2
    live = LiveFold(log[:half])
    first = live.tree()
    live.add(log[half:])
    second = live.tree()
    assert "digest" not in first.__dict__ and "digest" not in second.__dict__, "hashed before it was read"
    assert first.digest == from_scratch(log[:half]).digest != second.digest == from_scratch(log).digest
    assert first.hash_digest() == second.hash_digest() == "", "what a digest hashed is kept once it is read"

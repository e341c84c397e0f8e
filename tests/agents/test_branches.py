"""A forked feed is read along each of its chains without listing them (``agents.core.branches``).

An equivocator's events form a tree through ``prev``. The decision rules read "earlier on the
event's own chain" (PROTOCOL.md, sections 4-7), and listing every root-to-tip chain costs the
sum of their lengths: a feed forked at every seq (a comb) made every fold quadratic in time and
memory in the events of one admitted key. These tests hold the fold to memory linear in such a
feed, and the tree walk to what reading each chain apart gives, on random trees.
"""

from __future__ import annotations

import tracemalloc
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core import claims as leaf_rules
from agents.core import rounds as round_rules
from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    Event,
    PromiseBody,
    ProposalBody,
    Subgoal,
)
from agents.core.feeds import build_feeds
from agents.core.fold import fold
from agents.core.index import FoldIndex
from tests.builders import Feed, goal


def _comb(role: str, seqs: int) -> list[Event]:
    """A goal whose roster is one scorer, and a feed of ``role`` forked at every seq: each event
    on its chain beside a second one at its seq, citing the same predecessor, on the goal's root."""
    client, scorer = Feed("comb/client", "client"), Feed("comb/scorer", "scorer")
    made = client.at(1, goal("comb", [scorer.peer_id], 1))
    events = [made]
    comb = scorer if role == "scorer" else Feed("comb/decomposer", "decomposer")
    for seq in range(1, seqs + 1):
        events.append(comb.at(10 * seq, _comb_body(role, made.id, seq, 0)))
        events.append(comb.fork(10 * seq + 1, _comb_body(role, made.id, seq, 1)))
    return events


def _comb_body(role: str, node: str, seq: int, variant: int) -> object:
    if role == "scorer":
        return PromiseBody(node=node, round=2 + (seq + variant) % 998)
    return ProposalBody(node=node, strategy=f"s{seq}.{variant}", subgoals=(
        Subgoal(title="a", executable=True), Subgoal(title="b", executable=True)))


def _peak_bytes(events: list[Event]) -> int:
    tracemalloc.start()
    try:
        fold(events)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("role", ["scorer", "decomposer"])
def test_a_feed_forked_at_every_seq_folds_in_memory_linear_in_its_events(role: str) -> None:
    """Twice the seqs, about twice the memory (a list per chain: four times)."""
    small, large = _peak_bytes(_comb(role, 300)), _peak_bytes(_comb(role, 600))
    assert large < 3 * small, f"a comb of 600 seqs took {large / small:.1f}x the memory of 300 seqs"


# random trees: an admitted scorer's promises, ballots and acks on one node, with forks anywhere

NODE = "ab" * 32


@st.composite
def _trees(draw: st.DrawFn) -> list[Event]:
    """A scorer's events on ``NODE`` (and a few elsewhere, candidates too), each one citing a random event of
    its feed held so far (or none at seq 1): a random tree of chains. A claim per epoch by one
    executor, for the acks to name."""
    scorer, executor = Feed("tree/scorer", "scorer"), Feed("tree/executor", "executor")
    claims = [executor.at(epoch, ClaimBody(leaf=NODE, epoch=epoch)) for epoch in (1, 2, 3)]
    events: list[Event] = list(claims)
    mine: list[Event] = []
    for at in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["promise", "ballot", "ack", "candidate", "elsewhere"]))
        round_ = draw(st.integers(1, 5))
        if kind == "promise":
            body: object = PromiseBody(node=NODE, round=max(2, round_))
        elif kind == "ballot":
            body = BallotBody(node=NODE, round=round_, candidate=draw(st.sampled_from("cdef")) * 64,
                              approve=draw(st.booleans()))
        elif kind == "ack":
            epoch = draw(st.integers(1, 3))
            body = AckBody(leaf=NODE, claim=draw(st.sampled_from(claims)).id, epoch=epoch)
        elif kind == "candidate":
            body = CandidateBody(node=draw(st.sampled_from([NODE, "cd" * 32])), round=round_,
                                 value="ef" * 32, promises=() if round_ == 1 else ("ab" * 32,))
        else:
            body = PromiseBody(node="cd" * 32, round=max(2, round_))
        before = _before(draw, mine)
        event = _sign_after(scorer, before, body, 1000 + at)
        mine.append(event)
        events.append(event)
    return events


def _before(draw: st.DrawFn, mine: list[Event]) -> Event | None:
    """The event the next one cites: mostly the last (long chains, unwound far), else any
    earlier one or none (a second seq 1)."""
    if mine and draw(st.integers(0, 3)) > 0:
        return mine[-1]
    return draw(st.sampled_from([None, *mine]))


def _sign_after(feed: Feed, before: Event | None, body: object, ms: int) -> Event:
    author = feed.author
    author.seq, author.prev = (before.seq, before.id) if before is not None else (0, None)
    feed.now = max(feed.now, ms)
    return author.sign(body)  # type: ignore[arg-type]


def _chains(events: list[Event], author: str) -> list[list[Event]]:
    """Every root-to-tip chain of an author's events, by ``prev``: the definition the walk keeps."""
    mine = {e.id: e for e in events if e.author == author}
    cited = {e.prev for e in mine.values()}
    chains = []
    for tip in (e for e in mine.values() if e.id not in cited):
        chain = [tip]
        while chain[-1].prev is not None:
            chain.append(mine[chain[-1].prev])
        chains.append(chain[::-1])
    return chains


def _read_each_chain(chains: list[list[Event]], epoch_of: dict[str, int]
                     ) -> tuple[set[str], dict[str, tuple[str, ...]], int, set[str]]:
    """Counted ballots, counted promises (with the approving ballots before them), the highest
    round entered, and the claims acked in their epoch, reading every chain apart (PROTOCOL.md, sections 5-6)."""
    ballots: set[str] = set()
    promises: dict[str, tuple[str, ...]] = {}
    entered = 1
    acked: set[str] = set()
    for chain in chains:
        current, balloted, approved, epochs = 1, set(), [], set()
        for event in (e for e in chain if e.body.__dict__.get("node", e.body.__dict__.get("leaf")) == NODE):
            body = event.body
            if isinstance(body, PromiseBody) and body.round > current:
                promises[event.id] = tuple(approved)
                current = body.round
            elif isinstance(body, BallotBody) and body.round not in balloted:
                balloted.add(body.round)
                if body.round >= current:
                    ballots.add(event.id)
                    if body.approve:
                        approved.append(event.id)
                current = max(current, body.round)
            elif isinstance(body, AckBody) and body.epoch not in epochs:
                epochs.add(body.epoch)
                if epoch_of.get(body.claim) == body.epoch:
                    acked.add(body.claim)
        entered = max(entered, current)
    return ballots, promises, entered, acked


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trees())
def test_walking_a_forked_feed_once_reads_what_each_of_its_chains_reads(events: list[Event]) -> None:
    scorer = events[-1].author
    index = FoldIndex(build_feeds(events))
    chains = index.chains(NODE, (scorer,))
    ballots, promises, entered = round_rules._walk_chains(chains)
    claims = [e for e in events if isinstance(e.body, ClaimBody)]
    leaf = leaf_rules.settle(NODE, 1, claims, [], chains, defaultdict(list), {})
    expected = _read_each_chain(_chains(events, scorer), {c.id: c.body.epoch for c in claims})
    assert set(ballots) == expected[0]
    assert {p: tuple(b.event.id for b in promise.approved_before) for p, promise in promises.items()} == expected[1]
    assert entered.get(scorer, 1) == expected[2]
    assert {c for c, view in leaf.claims.items() if view.acks} == expected[3]
    assert index.first_candidates == _first_on_their_chain(events, scorer)


def _first_on_their_chain(events: list[Event], author: str) -> set[str]:
    """The author's candidates with no earlier one for the same (node, round) on their chain."""
    mine = {e.id: e for e in events if e.author == author}
    first = set()
    for event in mine.values():
        if isinstance(event.body, CandidateBody):
            earlier = mine.get(event.prev) if event.prev else None
            while earlier is not None and not (isinstance(earlier.body, CandidateBody) and (
                    earlier.body.node, earlier.body.round) == (event.body.node, event.body.round)):
                earlier = mine.get(earlier.prev) if earlier.prev else None
            if earlier is None:
                first.add(event.id)
    return first


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_forked_decomposers_drafts_are_numbered_along_their_own_chain(data: st.DataObject) -> None:
    """A draft's number on its node (the first three count) is its place among its author's
    drafts there on its own chain, whatever the other branches hold."""
    decomposer, mine = Feed("tree/decomposer", "decomposer"), []
    for at in range(data.draw(st.integers(1, 30))):
        body = ProposalBody(node=data.draw(st.sampled_from([NODE, "cd" * 32])), strategy=f"s{at}", subgoals=(
            Subgoal(title="a", executable=True), Subgoal(title="b", executable=True)))
        mine.append(_sign_after(decomposer, _before(data.draw, mine), body, 1000 + at))
    index = FoldIndex(build_feeds(mine))
    by_id = {e.id: e for e in mine}
    for event in mine:
        earlier = by_id.get(event.prev) if event.prev else None
        number = 1
        while earlier is not None:
            number += earlier.body.node == event.body.node
            earlier = by_id.get(earlier.prev) if earlier.prev else None
        assert index.draft_number[event.id] == number

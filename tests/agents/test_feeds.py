"""Per-author feeds: gaps wait, forks keep both branches as evidence, role or clock breaks cut,
the same way in any order."""

from __future__ import annotations

import itertools

from agents.core.clock import Timestamp
from agents.core.events import ProposalBody, Subgoal
from agents.core.feeds import build_feeds
from agents.core.identity import Identity
from tests.builders import ticket_sig

DEC = Identity(b"d" * 32)


def sign_event(identity, role, seq, prev, ts, body):
    from agents.core.events import sign_event as sign

    return sign(identity, role, seq, prev, ts, body, ticket_sig(identity.peer_id, role))


def _body(title: str) -> ProposalBody:
    return ProposalBody(node="ab" * 32, strategy="s", subgoals=(
        Subgoal(title=title, executable=True), Subgoal(title=title + "2", executable=True)))


def _chain(n: int, start_ms: int = 1, title: str = "t", role="decomposer"):
    events, prev = [], None
    for seq in range(1, n + 1):
        e = sign_event(DEC, role, seq, prev, Timestamp(start_ms + seq, 0), _body(f"{title}{seq}"))
        events.append(e)
        prev = e.id
    return events


def test_a_gap_holds_the_rest_of_the_feed_until_it_is_filled() -> None:
    a, b, c = _chain(3)
    feeds = build_feeds([a, c])
    assert feeds.accepted == (a,) and feeds.pending == (c,)
    assert feeds.heads == {DEC.peer_id: (1, a.id)}
    filled = build_feeds([c, b, a])
    assert set(filled.accepted) == {a, b, c} and not filled.pending


def test_a_fork_keeps_both_branches_as_evidence_whichever_was_seen_first() -> None:
    """Cutting a feed at a fork would erase what honest members already decided with it
    (an approval that completed a quorum); both branches stay, the author is marked."""
    a, b, c = _chain(3)
    other_b = sign_event(DEC, "decomposer", 2, a.id, Timestamp(99, 0), _body("other"))
    results = {
        (build_feeds(order).accepted, build_feeds(order).equivocators)
        for order in itertools.permutations([a, b, c, other_b])
    }
    assert len(results) == 1
    accepted, equivocators = results.pop()
    assert set(accepted) == {a, b, c, other_b}
    assert equivocators == {DEC.peer_id}
    assert [i.rule for i in build_feeds([a, b, other_b]).issues] == ["fork"]


def test_an_event_citing_a_predecessor_not_held_waits_and_proves_nothing_until_it_comes() -> None:
    """Until the cited event comes it may be at another seq (a broken link, not a fork): an
    author listed as an equivocator on that guess could be taken off the list by the event
    that settles it, and two members holding one set would disagree on who forked."""
    a, b, _ = _chain(3)
    hidden_b = sign_event(DEC, "decomposer", 2, a.id, Timestamp(50, 0), _body("hidden"))
    c_on_hidden = sign_event(DEC, "decomposer", 3, hidden_b.id, Timestamp(60, 0), _body("c"))
    feeds = build_feeds([a, b, c_on_hidden])  # never saw hidden_b itself
    assert set(feeds.accepted) == {a, b} and feeds.pending == (c_on_hidden,)
    assert not feeds.issues and not feeds.equivocators
    feeds = build_feeds([a, b, c_on_hidden, hidden_b])  # it was at seq 2: two events there
    assert set(feeds.accepted) == {a, b, hidden_b, c_on_hidden}
    assert [i.rule for i in feeds.issues] == ["fork"] and feeds.equivocators == {DEC.peer_id}
    far = sign_event(DEC, "decomposer", 7, "ef" * 32, Timestamp(70, 0), _body("far"))
    c_on_far = sign_event(DEC, "decomposer", 3, far.id, Timestamp(80, 0), _body("c"))
    feeds = build_feeds([a, b, c_on_far, far])  # it was at seq 7: a broken link, no fork
    assert not feeds.equivocators and not feeds.issues and set(feeds.pending) == {far, c_on_far}


def test_a_feed_cannot_change_role_or_go_back_in_time() -> None:
    first = sign_event(DEC, "decomposer", 1, None, Timestamp(10, 0), _body("x"))
    earlier = sign_event(DEC, "decomposer", 2, first.id, Timestamp(10, 0), _body("y"))
    feeds = build_feeds([first, earlier])
    assert feeds.accepted == (first,) and [i.rule for i in feeds.issues] == ["clock"]
    from agents.core.events import ClaimBody

    switch = sign_event(DEC, "executor", 2, first.id, Timestamp(11, 0), ClaimBody(leaf="cd" * 32, epoch=1))
    feeds = build_feeds([first, switch])
    assert feeds.accepted == (first,) and [i.rule for i in feeds.issues] == ["role"]


def test_a_broken_link_cuts_the_rest_of_the_chain_the_same_way_on_either_walk() -> None:
    """A gap-free, fork-free feed is read in one pass (``_one_chain``), any other by walking
    its links: both cut everything after a broken link, with one issue, and agree on the head
    and the links. An event past a gap sends the same chain down the general walk."""
    a, b = _chain(2)
    late = sign_event(DEC, "decomposer", 3, b.id, Timestamp(2, 0), _body("late"))  # not after b's clock
    after = [sign_event(DEC, "decomposer", 4, late.id, Timestamp(50, 0), _body("d"))]
    after.append(sign_event(DEC, "decomposer", 5, after[0].id, Timestamp(60, 0), _body("e")))
    past_gap = sign_event(DEC, "decomposer", 9, "ef" * 32, Timestamp(90, 0), _body("gap"))
    one_pass = build_feeds([after[1], late, a, after[0], b])
    walked = build_feeds([a, b, late, *after, past_gap])
    for feeds in (one_pass, walked):
        assert feeds.accepted == (a, b)
        assert feeds.cut == (late, *after)
        assert [(i.seq, i.rule) for i in feeds.issues] == [(3, "clock")]
        assert feeds.heads == {DEC.peer_id: (2, b.id)} and feeds.parent == {b.id: a.id}
    assert one_pass.pending == () and walked.pending == (past_gap,)

"""Two members that sync end with the same event set and digest, from any pair of subsets."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core.clock import Timestamp
from agents.core.events import ProposalBody, Subgoal, sign_event
from agents.core.fold import fold
from agents.core.identity import Identity
from agents.core.sync import EventIndex, Events
from tests.builders import ticket_sig
from tests.eventgen import Universe, universes


def sync_until_quiet(a: EventIndex, b: EventIndex, limit: int) -> int:
    """Run exchanges both ways until a round moves nothing; returns the rounds it took."""
    for rounds in range(1, 200):
        moved = 0
        for me, peer in ((a, b), (b, a)):
            offer = me.offer_for(peer.summary())
            if offer is None:
                continue
            need, push = peer.answer_offer(offer, limit)
            if push is not None:
                moved += me.add_all(push.events)
            if need is not None:
                answer = me.answer_need(need)
                assert isinstance(answer, Events)
                moved += peer.add_all(answer.events)
        if moved == 0:
            return rounds
    raise AssertionError("sync did not go quiet in 200 rounds")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(universes(), st.data(), st.sampled_from([1, 3, 1000]))
def test_two_members_with_any_subsets_converge_to_one_set_and_digest(universe: Universe, data, limit) -> None:
    pick = st.lists(st.sampled_from(universe.events), unique_by=lambda e: e.id)
    a, b = EventIndex(data.draw(pick)), EventIndex(data.draw(pick))
    union = {e.id for e in a.events()} | {e.id for e in b.events()}
    sync_until_quiet(a, b, limit)
    assert {e.id for e in a.events()} == {e.id for e in b.events()} == union
    assert fold(a.events()).digest == fold(b.events()).digest
    assert a.offer_for(b.summary()) is None  # quiet: nothing left to offer


def test_forked_branches_travel_whole_so_both_sides_hold_the_same_evidence() -> None:
    author = Identity(b"f" * 32)

    def feed(tag: str, shared: list) -> list:
        events, prev = list(shared), shared[-1].id if shared else None
        for seq in range(len(shared) + 1, 6):
            body = ProposalBody(node="ab" * 32, strategy=tag, subgoals=(
                Subgoal(title=f"{tag}{seq}", executable=True), Subgoal(title="x", executable=True)))
            event = sign_event(author, "decomposer", seq, prev, Timestamp(seq * 10, 0), body,
                               ticket_sig(author.peer_id, "decomposer"))
            events.append(event)
            prev = event.id
        return events

    common = feed("c", [])[:2]
    left, right = EventIndex(feed("left", common)), EventIndex(feed("right", common))
    sync_until_quiet(left, right, limit=1000)
    a, b = fold(left.events()), fold(right.events())
    assert a.digest == b.digest and a.equivocators == b.equivocators == {author.peer_id}
    assert len(left) == len(right) == 8


def test_a_late_joiner_with_nothing_gets_everything_in_bounded_batches() -> None:
    from tests.agents.test_store import simulate_events

    events = simulate_events()
    full, empty = EventIndex(events), EventIndex()
    rounds = sync_until_quiet(full, empty, limit=10)
    assert len(empty) == len(events) and rounds > 1
    assert fold(empty.events()).digest == fold(events).digest


def test_a_fork_below_the_pullers_head_still_travels() -> None:
    """The puller holds one branch of a fork (its chain looks whole); the server holds both:
    the other branch must be offered, or the puller never sees the fork (found by the
    simulation's hostile forker)."""
    author = Identity(b"g" * 32)
    body = ProposalBody(node="ab" * 32, strategy="s", subgoals=(Subgoal(title="a", executable=True),
                                                                Subgoal(title="b", executable=True)))
    ticket = ticket_sig(author.peer_id, "decomposer")
    first = sign_event(author, "decomposer", 1, None, Timestamp(10, 0), body, ticket)
    other = sign_event(author, "decomposer", 1, None, Timestamp(11, 0),
                       body.model_copy(update={"strategy": "t"}), ticket)
    puller, server = EventIndex([first]), EventIndex([first, other])
    # one pull, as members do it (agents.syncproto.pull): the server's offer, the puller's need
    offer = server.offer_for(puller.summary())
    assert offer is not None
    wanted = [i for o in offer.authors.values() for i in o.ids if i not in puller]
    puller.add_all(e for i in wanted if (e := server.get(i)) is not None)
    assert {e.id for e in puller.events()} == {first.id, other.id}

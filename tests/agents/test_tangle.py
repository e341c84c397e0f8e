"""A feed kept up to date event by event (``agents.core.tangle``) is ``build_feeds`` of the same
events at every moment: random feeds with forks, gaps, broken links and missing predecessors,
added in random batches."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.core.clock import Timestamp
from agents.core.events import ClaimBody, Event, ProposalBody, Subgoal, sign_event
from agents.core.feeds import build_feeds
from agents.core.tangle import Tangle
from tests.builders import identity, ticket_sig

WHO = identity("tangle/author")
TICKETS = {role: ticket_sig(WHO.peer_id, role) for role in ("decomposer", "executor")}


@st.composite
def _events(draw: st.DrawFn) -> list[Event]:
    """An author's events: each cites one of those before it (mostly the last), none, or an id
    nobody holds, at the next seq or another, usually later in time, usually in its role."""
    events: list[Event] = []
    for at in range(draw(st.integers(1, 30))):
        pick = draw(st.integers(0, 9))
        before = events[-1] if events and pick < 6 else draw(st.sampled_from(events)) if events and pick < 8 else None
        prev = before.id if before is not None else ("ab" * 32 if pick == 9 else None)
        seq = 1 if prev is None else max(2, (before.seq if before is not None else 1) + draw(
            st.sampled_from([1, 1, 1, 1, 0, 2])))
        ms = (before.hlc[0] if before is not None else 1000) + draw(st.sampled_from([1, 1, 1, 5, 0, -1]))
        role = "decomposer" if draw(st.integers(0, 9)) else "executor"
        body = ProposalBody(node="cd" * 32, strategy=f"s{at}", subgoals=(
            Subgoal(title="a", executable=True), Subgoal(title="b", executable=True))) if role == "decomposer" \
            else ClaimBody(leaf="cd" * 32, epoch=at + 1)
        events.append(sign_event(WHO, role, seq, prev, Timestamp(max(ms, 0), 0), body, TICKETS[role]))
    return events


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events(), st.randoms(use_true_random=False), st.data())
def test_a_tangle_is_build_feeds_of_its_events_after_every_batch(events: list[Event], rnd, data) -> None:
    order = list(events)
    rnd.shuffle(order)
    order += data.draw(st.lists(st.sampled_from(events), max_size=5))  # duplicates
    tangle, held, came = Tangle(WHO.peer_id), [], []
    while order:
        size = data.draw(st.integers(1, 6))
        batch, order = order[:size], order[size:]
        came += tangle.add(batch)
        held += batch
        feeds = build_feeds(held)
        assert sorted(came, key=lambda e: (e.seq, e.id)) == list(feeds.accepted)
        assert {e.id for e, place in ((tangle.by_id[i], p) for i, p in tangle.place.items()) if place == "pending"} \
            == {e.id for e in feeds.pending}
        assert {i for i, p in tangle.place.items() if p == "cut"} == {e.id for e in feeds.cut}
        assert (tangle.counts["in"], tangle.counts["pending"], tangle.counts["cut"]) == (
            len(feeds.accepted), len(feeds.pending), len(feeds.cut))
        assert tangle.issues == feeds.issues
        assert tangle.forked == (WHO.peer_id in feeds.equivocators)
        assert ((tangle.head.seq, tangle.head.id) if tangle.head else None) == feeds.heads.get(WHO.peer_id)
        assert tangle.parent == feeds.parent


def test_the_generator_makes_forks_gaps_and_broken_links() -> None:
    """A property over feeds that are all one clean chain would prove nothing."""
    seen = {"fork": 0, "pending": 0, "cut": 0, "clean": 0}

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_events())
    def count(events: list[Event]) -> None:
        feeds = build_feeds(events)
        seen["fork"] += bool(feeds.equivocators)
        seen["pending"] += bool(feeds.pending)
        seen["cut"] += bool(feeds.cut)
        seen["clean"] += not (feeds.equivocators or feeds.pending or feeds.cut)

    count()
    assert all(v >= 5 for v in seen.values()), seen

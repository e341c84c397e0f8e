"""The sync conversation over a stream: byte budgets per frame, strict replies, admission first."""

from __future__ import annotations

import json

import pytest
import trio

from agents import syncproto, syncwire
from agents.core.clock import Timestamp
from agents.core.events import ResultBody, sign_event
from agents.core.sync import EventIndex, Need, SeqRange
from agents.net.base import FrameTooLarge, StreamClosed
from agents.net.streams import Libp2pStream
from agents.syncproto import EVENTS_BUDGET, LIMITS, SyncProtocolError, pull, serve_pull
from tests.builders import credentials, ticket_sig


class Pipe:
    """One end of an in-memory frame pipe that records every frame it sends."""

    def __init__(self, peer: str, inbox, outbox) -> None:
        self.peer, self._inbox, self._outbox = peer, inbox, outbox
        self.sent: list[bytes] = []

    async def send(self, frame: bytes) -> None:
        self.sent.append(frame)
        await self._outbox.send(frame)

    async def receive(self, limit: int = 1 << 30) -> bytes:
        try:
            frame = await self._inbox.receive()
        except trio.EndOfChannel:
            raise StreamClosed("closed") from None
        if len(frame) > limit:
            raise StreamClosed(f"a {len(frame)}-byte frame (limit {limit})")
        return frame

    async def aclose(self) -> None:
        await self._outbox.aclose()

    async def abort(self) -> None:
        await self._outbox.aclose()


def pipes(puller: str, server: str) -> tuple[Pipe, Pipe]:
    to_server, server_inbox = trio.open_memory_channel[bytes](100)
    to_puller, puller_inbox = trio.open_memory_channel[bytes](100)
    return Pipe(server, puller_inbox, to_server), Pipe(puller, server_inbox, to_puller)


def feed(name: str, count: int, output=lambda seq: f"{seq} " + "\"quoted\" " * 880) -> list:
    """``count`` results of one feed, each a different event (about 8 KiB each by default)."""
    me = credentials(name, "executor")
    events, prev = [], None
    for seq in range(1, count + 1):
        body = ResultBody(leaf="ab" * 32, claim="cd" * 32, output=output(seq))
        event = sign_event(me.identity, "executor", seq, prev, Timestamp(seq, 0), body,
                           ticket_sig(me.identity.peer_id, "executor"))
        events.append(event)
        prev = event.id
    return events


def big_results(count: int) -> list:
    return feed("executor-big", count)


def small_feed(name: str, count: int) -> list:
    return feed(name, count, lambda seq: f"answer {seq}")


def forked_feed(name: str, count: int) -> list:
    """A small feed and a second event at seq 1 by the same author: a fork, so its ids travel
    (a clean chain is offered as a run, without ids)."""
    return small_feed(name, count) + feed(name, 1, lambda seq: "the other branch")


async def open_pull(near: Pipe, me) -> None:
    """A hand-driven puller's first frame: its summary of nothing."""
    await near.send(json.dumps({"type": "summary", "cluster": me.cluster, "ticket": me.ticket.wire(),
                                "authors": {}}).encode())


async def _converse(server_index: EventIndex, puller_index: EventIndex) -> tuple[list[bytes], Pipe]:
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)
    result: list[list[bytes]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_pull, far, server_index, them)
        received, _summary = await pull(near, puller_index, me)
        result.append(received)
    return result[0], far


def test_events_frames_stay_within_their_budget_and_everything_still_arrives() -> None:
    events = big_results(400)  # about 3.6 MB of canonical bytes, doubled quotes when escaped
    received, server_end = trio.run(_converse, EventIndex(events), EventIndex())
    assert sorted(received) == sorted(e.to_wire() for e in events)
    frames = [json.loads(f) for f in server_end.sent]
    event_frames = [(f, raw) for f, raw in zip(frames, server_end.sent, strict=True) if f["type"] == "events"]
    assert len(event_frames) > 3, "one need of 400 seqs must be answered over several budgeted frames"
    assert all(len(raw) <= LIMITS["events"] for _f, raw in event_frames)
    assert all(len(raw) <= EVENTS_BUDGET + 2 * 32 * 1024 + 1024 for _f, raw in event_frames)
    assert any(f["rest_ranges"] for f, _raw in event_frames)


def test_the_same_budget_holds_for_ids_asked() -> None:
    events = big_results(400) + feed("executor-big", 1, lambda seq: "a fork: ids travel")
    received, server_end = trio.run(_converse, EventIndex(events), EventIndex())
    assert sorted(received) == sorted(e.to_wire() for e in events)
    event_frames = [f for f in map(json.loads, server_end.sent) if f["type"] == "events"]
    assert len(event_frames) > 3 and any(f["rest"] for f in event_frames)
    assert all(not f["rest_ranges"] for f in event_frames)


@pytest.mark.parametrize("by_id", [True, False], ids=["ids", "a-run"])
@pytest.mark.parametrize("padding", [0, 1], ids=["no-event", "one-event-not-asked"])
def test_a_server_that_leaves_everything_for_later_is_a_protocol_error_not_a_loop(padding: int, by_id: bool) -> None:
    """A frame that leaves every asked id or seq for later answers nothing, with or without an
    event beside them: the puller's deadline counts from its last frame, so such frames would
    keep a pull going with no end."""
    async def main() -> None:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)
        server_index = EventIndex(big_results(2))

        async def stubborn_server() -> None:
            await far.receive()
            held = server_index.events()
            authors = {held[0].author: [0, [e.id for e in held]] if by_id else [0, 2, held[-1].id]}
            await far.send(json.dumps({"type": "offer", "ticket": them.ticket.wire(), "summary": {},
                                       "authors": authors, "more": False}).encode())
            need = json.loads(await far.receive())
            filler = [e.to_wire().decode() for e in big_results(3)[2:]][:padding]  # an event nobody asked for
            await far.send(json.dumps({"type": "events", "events": filler, "rest": need["ids"],
                                       "rest_ranges": need["ranges"]}).encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stubborn_server)
            with pytest.raises(SyncProtocolError, match="as much as was asked"), trio.fail_after(10):  # not a loop
                await pull(near, EventIndex(), me)

    trio.run(main)


class _Wire:
    """A libp2p stream stand-in that hands out its bytes and remembers how much was asked for."""

    def __init__(self, data: bytes) -> None:
        self.data, self.served = data, 0

    async def read(self, n: int) -> bytes:
        chunk = self.data[self.served:self.served + min(n, 7)]  # small chunks: reassembly must cope
        self.served += len(chunk)
        return chunk


def test_the_libp2p_framing_refuses_an_absurd_length_after_four_bytes_and_reassembles_the_rest() -> None:
    absurd = _Wire((2**32 - 1).to_bytes(4, "big") + b"{" * 1000)
    with pytest.raises(FrameTooLarge, match="4294967295-byte frame"):
        trio.run(Libp2pStream(absurd, "peer").receive)
    assert absurd.served <= 7  # the prefix (and what came in its chunk), never the announced body
    frames = [b'{"type":"need","ids":[]}', b"x" * 5000]
    wire = _Wire(b"".join(len(f).to_bytes(4, "big") + f for f in frames))
    stream = Libp2pStream(wire, "peer")

    async def both() -> list[bytes]:
        return [await stream.receive(LIMITS["need"]), await stream.receive()]

    assert trio.run(both) == frames
    with pytest.raises(FrameTooLarge):  # a step's own limit is smaller than the absolute one
        trio.run(Libp2pStream(_Wire((70_000).to_bytes(4, "big")), "peer").receive, LIMITS["need"])


def test_an_oversized_need_is_refused_before_it_is_read() -> None:
    async def main() -> None:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)

        async def greedy_puller() -> None:
            await open_pull(near, me)
            await near.receive()
            await near.send(json.dumps({"type": "need", "ids": ["ab" * 32] * 5000}).encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(greedy_puller)
            with pytest.raises(StreamClosed, match="limit"):
                await serve_pull(far, EventIndex(), them)

    trio.run(main)


@pytest.mark.parametrize(("second_feed", "pages"), [(3, [7, 7, 7, 1]), (2, [7, 7, 7])])
def test_an_offer_larger_than_a_page_comes_in_pages_and_everything_arrives(monkeypatch, second_feed, pages) -> None:
    """Offers are paged (``OFFER_PAGE`` ids a frame, an author's list going on in the next
    page), so no frame grows with the event set: one offer of a million ids was over the
    frame limit, and a member that far behind could never catch up. (Forked feeds: their
    ids travel.)"""
    monkeypatch.setattr(syncwire, "OFFER_PAGE", 7)
    events = forked_feed("executor-a", 17) + forked_feed("executor-b", second_feed)
    already = events[3:9]  # held already: offered, never asked for
    received, server_end = trio.run(_converse, EventIndex(events), EventIndex(already))
    assert sorted(received) == sorted(e.to_wire() for e in events if e not in already)
    offers = [json.loads(f) for f in server_end.sent if json.loads(f)["type"] == "offer"]
    assert [sum(len(ids) for _after, ids in o["authors"].values()) for o in offers] == pages
    assert [o["more"] for o in offers] == [True] * (len(pages) - 1) + [False]
    assert "summary" in offers[0] and all("summary" not in o for o in offers[1:])


def test_offer_pages_with_nothing_to_fetch_are_progress_too(monkeypatch) -> None:
    """A puller that holds what the later pages list fetches nothing for them, but is told of
    each page (its deadline counts from the last one): a long run of such pages must not
    look like a stalled pull."""
    monkeypatch.setattr(syncwire, "OFFER_PAGE", 7)
    events = forked_feed("executor-a", 22)  # 23 ids: seq 1 twice, then 2 to 22
    pages_told: list[int] = []

    async def main() -> list[bytes]:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_pull, far, EventIndex(events), them)
            received, _summary = await pull(near, EventIndex(events[2:22]), me, on_page=lambda: pages_told.append(1))
        return received

    received = trio.run(main)
    missing = events[:2] + events[22:]  # seq 1 (both branches) and 2: all on the first page
    assert sorted(received) == sorted(e.to_wire() for e in missing)
    assert len(pages_told) == 3  # pages 2, 3 and 4, each with nothing to fetch


def test_peek_reads_the_summary_and_fetches_nothing() -> None:
    """``swarm submit`` only wants to see its goal in a peer's summary; it used to pull
    everything the peer held, every 0.3 s, to read it."""
    events = small_feed("executor-a", 30)

    async def main() -> tuple[object, Pipe, Pipe]:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_pull, far, EventIndex(events), them)
            role, theirs = await syncproto.peek(near, EventIndex(), me)
            assert role == "scorer"  # the server's admitted role
        return theirs, near, far

    theirs, near, far = trio.run(main)
    assert theirs.authors[events[0].author].prefix_id == events[-1].id  # type: ignore[attr-defined]
    assert [json.loads(f)["type"] for f in near.sent] == ["summary", "done"]
    assert [json.loads(f)["type"] for f in far.sent] == ["offer"]


def test_a_next_after_the_last_page_is_a_protocol_error() -> None:
    async def main() -> None:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)

        async def pushy_puller() -> None:
            await open_pull(near, me)
            offer = json.loads(await near.receive())
            assert offer["more"] is False
            await near.send(json.dumps({"type": "next"}).encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pushy_puller)
            with pytest.raises(SyncProtocolError, match="after the last"):
                await serve_pull(far, EventIndex(small_feed("executor-a", 3)), them)

    trio.run(main)


@pytest.mark.parametrize(("flag", "refusal"), [({}, "'more'"), ({"more": True}, "lists no ids and no run")],
                         ids=["without-its-more-flag", "more-follow-but-no-ids"])
def test_an_offer_page_that_breaks_the_rules_is_refused_before_anything_is_asked(flag, refusal) -> None:
    """An offer must say whether more follow, and one that says so must list ids: an endless
    run of empty pages would be progress about nothing."""
    async def main() -> None:
        me, them = credentials("puller", "observer"), credentials("server", "scorer")
        near, far = pipes(me.identity.peer_id, them.identity.peer_id)

        async def sloppy_server() -> None:
            await far.receive()
            await far.send(json.dumps({"type": "offer", "ticket": them.ticket.wire(), "summary": {},
                                       "authors": {}, **flag}).encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sloppy_server)
            with pytest.raises(SyncProtocolError, match=refusal), trio.fail_after(10):  # not a wait for more
                await pull(near, EventIndex(), me)
        assert [json.loads(f)["type"] for f in near.sent] == ["summary"]

    trio.run(main)


def _frames(pipe: Pipe, kind: str) -> list[dict]:
    return [f for f in map(json.loads, pipe.sent) if f["type"] == kind]


def test_a_clean_feed_travels_as_a_run_asked_for_by_seq_without_ids() -> None:
    events = small_feed("executor-a", 30)
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def main() -> list[bytes]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_pull, far, EventIndex(events), them)
            received, _summary = await pull(near, EventIndex(events[:12]), me)
        return received

    received = trio.run(main)
    assert sorted(received) == sorted(e.to_wire() for e in events[12:])
    assert _frames(far, "offer")[0]["authors"] == {events[0].author: [12, 30, events[-1].id]}
    assert [(f["ids"], f["ranges"]) for f in _frames(near, "need")] == [([], [[events[0].author, 13, 30]])]


def test_a_member_behind_offers_the_run_it_holds_and_its_peer_ahead_asks_nothing() -> None:
    """Under 3.0.0 a member behind (a joiner halfway) offered its whole copy of each feed, by
    id, to every peer ahead of it on every pull: 666 MB served by a joiner of a million events."""
    events = small_feed("executor-a", 30)
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def main() -> list[bytes]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_pull, far, EventIndex(events[:10]), them)
            received, _summary = await pull(near, EventIndex(events), me)
        return received

    assert trio.run(main) == []
    assert _frames(far, "offer")[0]["authors"] == {events[0].author: [0, 10, events[9].id]}
    assert [json.loads(f)["type"] for f in near.sent] == ["summary", "done"]


def test_a_puller_holding_another_branch_gets_the_servers_run_whole_and_sees_the_fork() -> None:
    ours, theirs = feed("executor-a", 6, lambda seq: f"branch one {seq}"), small_feed("executor-a", 6)
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def main() -> list[bytes]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_pull, far, EventIndex(theirs), them)
            received, _summary = await pull(near, EventIndex(ours), me)
        return received

    assert sorted(trio.run(main)) == sorted(e.to_wire() for e in theirs)
    assert [f["ranges"] for f in _frames(near, "need")] == [[[theirs[0].author, 1, 6]]]


def test_rest_ranges_outside_what_was_asked_are_a_protocol_error() -> None:
    events = small_feed("executor-a", 5)
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def lying_server() -> None:
        await far.receive()
        await far.send(json.dumps({"type": "offer", "ticket": them.ticket.wire(), "summary": {},
                                   "authors": {events[0].author: [0, 5, events[-1].id]}, "more": False}).encode())
        await far.receive()
        await far.send(json.dumps({"type": "events", "events": [events[0].to_wire().decode()], "rest": [],
                                   "rest_ranges": [[events[0].author, 2, 9]]}).encode())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lying_server)
            with pytest.raises(SyncProtocolError, match="inside the ranges asked"), trio.fail_after(10):
                await pull(near, EventIndex(), me)

    trio.run(main)


@pytest.mark.parametrize(("need", "refusal"), [
    ({"ids": [], "ranges": [["x", 1, 501]]}, "more than 500"),
    ({"ids": ["ab" * 32] * 400, "ranges": [["x", 1, 101]]}, "more than 500"),
    ({"ids": [], "ranges": [["x", 5, 4]]}, "first <= last"),
    ({"ids": [], "ranges": [["x", 0, 4]]}, "first <= last"),
    ({"ids": [], "ranges": [["x", True, 4]]}, "first <= last"),
    ({"ids": []}, "'ranges'"),
], ids=["too-many-seqs", "ids-and-seqs-over-the-batch", "backwards", "seq-zero", "a-bool", "no-ranges"])
def test_a_need_that_breaks_the_rules_is_refused(need: dict, refusal: str) -> None:
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def rude_puller() -> None:
        await open_pull(near, me)
        await near.receive()
        await near.send(json.dumps({"type": "need", **need}).encode())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rude_puller)
            with pytest.raises(SyncProtocolError, match=refusal):
                await serve_pull(far, EventIndex(small_feed("executor-a", 3)), them)

    trio.run(main)


def test_a_cut_inside_a_range_leaves_the_rest_of_it_and_every_later_range_whole(monkeypatch) -> None:
    """The answer to a need of two ranges, cut by the budget inside the first: what is left
    starts after the last seq sent, and the second range is left whole; a cut between two
    events at one seq (a fork) goes on after that seq, so what is left is less than asked."""
    a, b = small_feed("executor-a", 6), small_feed("executor-b", 4)
    fork = feed("executor-a", 1, lambda seq: "the other branch")[0]  # a second event at seq 1
    event_size = len(a[1].to_wire()) + a[1].to_wire().count(b"\"") + 3  # seq 1 has no prev: shorter
    monkeypatch.setattr(syncproto, "EVENTS_BUDGET", 2 * event_size + 1)  # room for three events
    index = EventIndex(a + b)
    need = Need((), (SeqRange(a[0].author, 2, 6), SeqRange(b[0].author, 1, 4)))
    answer = syncproto._answer(index, need)
    assert answer["events"] == [e.to_wire().decode() for e in a[1:4]]
    assert answer["rest_ranges"] == [[a[0].author, 5, 6], [b[0].author, 1, 4]] and answer["rest"] == []

    index.add_all([fork])
    at_one = sorted([a[0], fork], key=lambda e: e.id)
    monkeypatch.setattr(syncproto, "EVENTS_BUDGET", 1)  # one event, then the cut
    answer = syncproto._answer(index, Need((), (SeqRange(a[0].author, 1, 6),)))
    assert answer["events"] == [at_one[0].to_wire().decode()]
    assert answer["rest_ranges"] == [[a[0].author, 2, 6]]  # its sibling comes by id on the next pull


@pytest.mark.parametrize(("answer", "refusal"), [
    ({"events": [], "rest": [], "rest_ranges": []}, "neither answered nor left for later"),
    ({"events": ["x"], "rest": [], "rest_ranges": [["A", 3, 5]]}, "neither answered nor left for later"),
], ids=["an-empty-frame", "part-answered-part-dropped"])
def test_a_frame_that_drops_what_was_asked_is_a_protocol_error(answer: dict, refusal: str) -> None:
    """A server holds all it offered (its set only grows), so what it neither sends nor leaves
    for later it holds back: empty frames would drip a pull along a run of 2^53 seqs."""
    events = small_feed("executor-a", 5)
    author = events[0].author
    for left in answer["rest_ranges"]:
        left[0] = author
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def holding_back() -> None:
        await far.receive()
        await far.send(json.dumps({"type": "offer", "ticket": them.ticket.wire(), "summary": {},
                                   "authors": {author: [0, 5, events[-1].id]}, "more": False}).encode())
        await far.receive()
        await far.send(json.dumps({"type": "events", **answer}).encode())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(holding_back)
            with pytest.raises(SyncProtocolError, match=refusal), trio.fail_after(10):
                await pull(near, EventIndex(), me)

    trio.run(main)


def test_an_id_left_for_later_many_times_is_asked_again_once() -> None:
    events = forked_feed("executor-a", 3)  # a fork: offered by id
    ids = [e.id for e in events]
    me, them = credentials("puller", "observer"), credentials("server", "scorer")
    near, far = pipes(me.identity.peer_id, them.identity.peer_id)

    async def repeating() -> None:
        await far.receive()
        await far.send(json.dumps({"type": "offer", "ticket": them.ticket.wire(), "summary": {},
                                   "authors": {events[0].author: [0, ids]}, "more": False}).encode())
        await far.receive()
        await far.send(json.dumps({"type": "events", "events": [e.to_wire().decode() for e in events[:3]],
                                   "rest": [ids[3]] * 30_000, "rest_ranges": []}).encode())
        again = json.loads(await far.receive())
        assert again["ids"] == [ids[3]]
        await far.send(json.dumps({"type": "events", "events": [events[3].to_wire().decode()], "rest": [],
                                   "rest_ranges": []}).encode())
        await far.receive()  # done

    async def main() -> list[bytes]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(repeating)
            with trio.fail_after(10):
                received, _summary = await pull(near, EventIndex(), me)
        return received

    assert sorted(trio.run(main)) == sorted(e.to_wire() for e in events)


def test_a_need_naming_authors_we_never_held_leaves_nothing_behind() -> None:
    index = EventIndex(small_feed("executor-a", 3))
    for n in range(100):
        assert index.in_range(SeqRange(f"nobody-{n}", 1, 5)) == []
    assert set(index._feeds) <= {e.author for e in index.events()}

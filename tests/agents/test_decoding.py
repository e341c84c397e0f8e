"""A frame decoded with its signature checks on worker threads gives exactly what decoding
each event alone gives, in the frame's order: the events, and each refusal with its rule."""

from __future__ import annotations

import base64

from agents.core.events import Event, EventRefused, decode_event
from agents.decoding import PARALLEL_FROM, decode_frame
from tests.builders import Feed, goal


def _outcome(raw: bytes) -> Event | str:
    try:
        return decode_event(raw)
    except EventRefused as exc:
        return exc.rule


def test_a_frame_decoded_in_parallel_is_each_event_decoded_alone_in_order() -> None:
    feed = Feed("writer", "client")
    events = [feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)) for i in range(PARALLEL_FROM + 40)]
    raws = [event.to_wire() for event in events]
    # spoil some: a signature by nobody, bytes that are not canonical, garbage, a changed id
    forged = events[7].to_wire().replace(events[7].sig.encode(), base64.b64encode(bytes(64)))
    raws[7] = forged
    raws[100] = raws[100].replace(b'{"author"', b'{ "author"')
    raws[150] = b"not an event"
    raws[-1] = raws[-1].replace(events[-1].id.encode(), events[-2].id.encode())
    expected = [_outcome(raw) for raw in raws]
    got = [item.rule if isinstance(item, EventRefused) else item for item in decode_frame(raws)]
    assert got == expected
    assert [expected[i] for i in (7, 100, 150, len(raws) - 1)] == ["signature", "canonical", "json", "id"]
    # an event's cached bytes are what it was decoded from
    assert all(item.to_wire() == raw for item, raw in zip(got, raws, strict=True) if isinstance(item, Event))

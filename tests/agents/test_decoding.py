"""A frame decoded with its signature checks on worker threads gives exactly what decoding
each event alone gives, in the frame's order: the events, and each refusal with its rule."""

from __future__ import annotations

import base64

from agents.core.decode import decode_event
from agents.core.events import Event, EventRefused
from agents.decoding import PARALLEL_FROM, FramePipeline, decode_frame
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


def test_an_event_decoded_equals_and_hashes_as_the_one_signed() -> None:
    feed = Feed("writer", "client")
    signed = feed.at(1_000, goal("Plan a trip", [feed.peer_id], 1))  # no bytes cached yet
    decoded = decode_event(signed.to_wire())
    fresh = feed.at(2_000, goal("Plan a trip", [feed.peer_id], 1))
    assert decoded == signed and hash(decoded) == hash(signed) and decoded != fresh
    assert signed.model_copy(update={"seq": 9}).to_wire() != signed.to_wire(), "a changed copy kept stale bytes"


def _leaf_types(annotation) -> set:
    """Every type a field annotation can hold, through Annotated, unions, tuples and models."""
    import typing

    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(annotation)[0])
    if origin is not None:
        return set().union(*(_leaf_types(arg) for arg in typing.get_args(annotation) if arg is not Ellipsis))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}.union(*(_leaf_types(f.annotation) for f in annotation.model_fields.values()))
    return {annotation}


def test_no_event_field_can_hold_a_float_so_decoding_may_skip_the_float_scan() -> None:
    """``decode_unverified`` encodes with ``check=False``: sound only while no field of an
    event or body can hold a float (or anything untyped that could carry one)."""
    import typing

    from pydantic import BaseModel

    leaves = _leaf_types(Event)
    values = {t for t in leaves if not isinstance(t, type) and t is not typing.Any}  # Literal[...] members
    types = leaves - values
    assert all(isinstance(v, (int, str)) and not isinstance(v, float) for v in values), values
    assert {t for t in types if not issubclass(t, BaseModel)} == {int, str, bool, type(None)}, types


def test_a_pipeline_gives_each_frame_decoded_in_order_one_frame_later() -> None:
    """Frames big enough for the workers come out one push later; a small frame with nothing
    held before it comes out at once; what comes out, in all, is ``decode_frame`` of each."""
    feed = Feed("writer", "client")
    raws = [feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)).to_wire() for i in range(3 * PARALLEL_FROM)]
    raws[5] = b"not an event"
    big, small, other_big = raws[:PARALLEL_FROM], raws[PARALLEL_FROM:PARALLEL_FROM + 3], raws[PARALLEL_FROM + 3:]
    frames = [small, big, small, other_big, big]
    pipeline = FramePipeline()
    outs = [pipeline.push(frame) for frame in frames]
    outs.append(pipeline.drain())
    assert [len(out) for out in outs] == [3, 0, len(big), 3, len(other_big), len(big)]
    assert pipeline.drain() == []
    got = [(raw, _rule(item)) for out in outs for raw, item in out]
    expected = [(raw, _rule(item)) for frame in frames for raw, item in zip(frame, decode_frame(frame), strict=True)]
    assert got == expected
    assert sum(item == "json" for _, item in got) == 2  # the spoilt event, in both pushes of ``big``


def _rule(item: Event | EventRefused) -> Event | str:
    return item.rule if isinstance(item, EventRefused) else item


def test_a_small_frame_checked_inline_refuses_a_forged_signature_like_decode_event() -> None:
    feed = Feed("writer", "client")
    raws = [feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)).to_wire() for i in range(5)]
    raws[2] = raws[2].replace(decode_event(raws[2]).sig.encode(), base64.b64encode(bytes(64)))
    assert len(raws) < PARALLEL_FROM
    got = [item.rule if isinstance(item, EventRefused) else item for item in decode_frame(raws)]
    assert got == [_outcome(raw) for raw in raws] and got[2] == "signature"

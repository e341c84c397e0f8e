"""Every tampered field of a signed event is refused, with the rule it broke."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.core.canonical import canonical_bytes
from agents.core.clock import Timestamp
from agents.core.decode import decode_event
from agents.core.events import (
    MAX_EVENT_BYTES,
    SIGNATURE_PATTERN,
    EventRefused,
    GoalBody,
    ProposalBody,
    Subgoal,
    VoteBody,
    sign_event,
)
from agents.core.identity import Identity
from tests.builders import ticket_sig

ALICE = Identity(b"a" * 32)
MALLORY = Identity(b"m" * 32)
NODE = "ab" * 32
SCORERS = tuple(sorted(Identity(bytes([i]) * 32).peer_id for i in range(1, 4)))


def _sign(identity: Identity, role: str, seq: int, prev: str | None, ts: Timestamp, body):
    return sign_event(identity, role, seq, prev, ts, body, ticket_sig(identity.peer_id, role))  # type: ignore[arg-type]


def _proposal(seq: int = 2, prev: str | None = "cd" * 32):
    body = ProposalBody(node=NODE, strategy="geography", subgoals=(
        Subgoal(title="Tokyo", description="", executable=True),
        Subgoal(title="Kyoto", description="temples", executable=False),
    ))
    return _sign(ALICE, "decomposer", seq, prev, Timestamp(1000, 2), body)


def test_round_trip_keeps_every_field() -> None:
    event = _proposal()
    assert decode_event(event.to_wire()) == event


def _paths(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))
    else:
        yield prefix


def _mutations(value):
    if isinstance(value, bool):
        candidates = [not value]
    elif isinstance(value, int):
        candidates = [value + 1, value - 1 if value > 0 else value + 2]
    elif isinstance(value, str):
        candidates = [value + "x", value[:-1] + ("0" if value[-1:] != "0" else "1"), ""]
    else:
        candidates = [1, "x"]
    return [c for c in candidates if c != value or type(c) is not type(value)]


WIRE = json.loads(_proposal().to_wire())


def _get(data, path):
    for key in path:
        data = data[key]
    return data


def _set(data, path, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "new"),
    [(path, new) for path in _paths(WIRE) for new in _mutations(_get(WIRE, path))],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else repr(v)[:12],
)
def test_every_tampered_field_is_refused(path, new) -> None:
    data = json.loads(_proposal().to_wire())
    _set(data, path, new)
    with pytest.raises(EventRefused) as refused:
        decode_event(canonical_bytes(data))
    assert refused.value.rule in {"schema", "id", "signature", "role", "chain", "author"}
    assert refused.value.rule in str(refused.value)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_byte_flip_is_refused(data) -> None:
    wire = bytearray(_proposal().to_wire())
    index = data.draw(st.integers(0, len(wire) - 1))
    wire[index] ^= data.draw(st.integers(1, 255))
    # canonical bytes are unique: any other bytes, even ones meaning the same values, are refused
    with pytest.raises(EventRefused):
        decode_event(bytes(wire))


def test_a_resigned_event_by_someone_else_keeps_nothing_of_the_original() -> None:
    forged = json.loads(_proposal().to_wire())
    forged["sig"] = json.loads(_sign(MALLORY, "decomposer", 2, "cd" * 32, Timestamp(1000, 2),
                                     _proposal().body).to_wire())["sig"]
    with pytest.raises(EventRefused, match="signature"):
        decode_event(canonical_bytes(forged))


def test_a_vote_by_a_decomposer_is_refused_by_role() -> None:
    vote = VoteBody(proposal=NODE, clarity=3, non_overlap=3, coverage=3, approve=True)
    with pytest.raises(EventRefused, match=r"\(role\).*vote must be authored by a scorer"):
        _sign(ALICE, "decomposer", 1, None, Timestamp(1, 0), vote)


def test_first_event_has_no_prev_and_later_ones_must() -> None:
    with pytest.raises(EventRefused, match="chain"):
        _proposal(seq=1, prev="cd" * 32)
    with pytest.raises(EventRefused, match="chain"):
        _proposal(seq=3, prev=None)


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        (b"not json", "json"),
        (b"{}", "schema"),
        (b"[1, 2]", "schema"),
        (b"x" * (MAX_EVENT_BYTES + 1), "size"),
    ],
)
def test_garbage_is_refused_by_the_first_rule_it_breaks(raw: bytes, rule: str) -> None:
    with pytest.raises(EventRefused) as refused:
        decode_event(raw)
    assert refused.value.rule == rule


def test_extra_fields_and_coerced_types_are_refused() -> None:
    data = json.loads(_proposal().to_wire())
    data["extra"] = 1
    with pytest.raises(EventRefused, match="schema"):
        decode_event(canonical_bytes(data))
    data = json.loads(_proposal().to_wire())
    data["seq"] = "2"
    with pytest.raises(EventRefused, match="schema"):
        decode_event(canonical_bytes(data))


def test_out_of_range_settings_are_refused_naming_the_field() -> None:
    goal = _sign(ALICE, "client", 1, None, Timestamp(1, 0), _goal())
    data = json.loads(goal.to_wire())
    data["body"]["quorum"] = 0
    with pytest.raises(EventRefused, match=r"body\.goal\.quorum"):
        decode_event(canonical_bytes(data))


def _goal(**changes) -> GoalBody:
    fields = {"text": "g", "scorers": SCORERS, "quorum": 2, "max_depth": 3, "claim_lease_ms": 1000,
              "hold_limit_ms": 4000, "round_ms": 1000, **changes}
    return GoalBody(**fields)


@pytest.mark.parametrize(("changes", "says"), [
    ({"quorum": 1}, "must be a majority of the 3 scorers"),
    ({"quorum": 4}, "must be a majority"),
    ({"scorers": tuple(reversed(SCORERS))}, "distinct peer ids in sorted order"),
    ({"scorers": (SCORERS[0], SCORERS[0])}, "distinct peer ids in sorted order"),
    ({"hold_limit_ms": 500}, "hold_limit_ms must be at least claim_lease_ms"),
])
def test_a_goal_whose_roster_cannot_decide_safely_is_refused(changes, says) -> None:
    with pytest.raises(ValueError, match=says):
        _goal(**changes)


@pytest.mark.parametrize(("path", "value"), [(("seq",), 2**53), (("hlc", 0), 2**53), (("hlc", 1), 2**31)])
def test_integers_beyond_what_every_implementation_holds_exactly_are_refused(path, value) -> None:
    data = json.loads(_proposal().to_wire())
    _set(data, path, value)
    with pytest.raises(EventRefused, match="schema"):
        decode_event(canonical_bytes(data))


def test_a_version_1_event_is_refused_naming_the_version() -> None:
    data = json.loads(_proposal().to_wire())
    data["v"] = 1
    with pytest.raises(EventRefused, match=r"schema.*v"):
        decode_event(canonical_bytes(data))


def _respelled(event, old: bytes, new: bytes) -> bytes:
    wire = event.to_wire()
    assert old in wire, old
    return wire.replace(old, new, 1)


@pytest.mark.parametrize(("spell", "why"), [
    (lambda e: json.dumps(json.loads(e.to_wire()), sort_keys=True).encode(), "whitespace after separators"),
    (lambda e: json.dumps(dict(reversed(json.loads(e.to_wire()).items())), separators=(",", ":")).encode(),
     "keys out of order"),
    (lambda e: e.to_wire() + b"\n", "a trailing newline"),
    (lambda e: b" " + e.to_wire(), "leading whitespace"),
    (lambda e: _respelled(e, b'"v":2', b'"v":2.0'), "2.0 for an integer"),
    (lambda e: _respelled(e, b'"v":2', b'"v":2e0'), "an exponent"),
    (lambda e: _respelled(e, b'"seq":2', b'"seq":02'), "a leading zero"),
    (lambda e: _respelled(e, b'{"author"', b'{"v":2,"author"'), "a duplicate key"),
    (lambda e: _respelled(e, b'"title":"Tokyo"', b'"title":"\\u0054okyo"'), "an escape that is not needed"),
    (lambda e: _respelled(e, b'"description":"",', b""), "an omitted field that has a default"),
])
def test_any_encoding_but_the_canonical_one_is_refused(spell, why) -> None:
    event = _proposal(seq=2, prev="ab" * 32)
    raw = spell(event)
    assert raw != event.to_wire()
    with pytest.raises(EventRefused) as refused:
        decode_event(raw)
    assert refused.value.rule in {"canonical", "json", "schema"}, why
    assert decode_event(event.to_wire()) == event


def test_a_lone_surrogate_is_refused_as_json_not_crashing_the_encoder() -> None:
    raw = _respelled(_proposal(), b'"title":"Tokyo"', b'"title":"\\ud800"')
    with pytest.raises(EventRefused) as refused:
        decode_event(raw)
    assert refused.value.rule == "json"


@given(st.from_regex(SIGNATURE_PATTERN, fullmatch=True))
def test_every_signature_the_schema_admits_is_64_bytes(text: str) -> None:
    """The signature checks rely on it (``decoding`` hands every decoded signature to a
    verifier process, whose requests have no room for another length)."""
    assert len(base64.b64decode(text, validate=True)) == 64


@pytest.mark.parametrize("length", [63, 65])
def test_a_signature_of_another_length_is_refused_by_the_schema(length: int) -> None:
    data = json.loads(_proposal().to_wire())
    data["sig"] = base64.b64encode(bytes(length)).decode()
    with pytest.raises(EventRefused) as refused:
        decode_event(canonical_bytes(data))
    assert refused.value.rule == "schema", refused.value

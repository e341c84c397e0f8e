"""Signed events: the only thing the swarm replicates (PROTOCOL.md, section 2).

Every event is an envelope around one body. The envelope names its author by
libp2p peer id, the role the author acts in and the author's admission ticket
(the cluster authority's signature binding that peer id to that role: see
``agents.core.admission``), the author's sequence number and the id of the
author's previous event (a per-author hash chain, as in Secure Scuttlebutt),
and a hybrid logical timestamp.

``id`` is the sha256 of the domain-prefixed canonical bytes of everything
except ``id`` and ``sig``; ``sig`` is the author's ed25519 signature over those
same bytes. Neither is ever trusted from the wire: ``agents.core.decode`` recomputes
the id from the parsed values and checks the signature against the key inside
the peer id. The ticket is checked by the receiver's ``Gate``, which knows the
cluster and its authority.

Which role may author which kind is fixed here (``AUTHOR_ROLE``): a vote by a
decomposer is refused on decode, before anything else sees it. Every integer
is bounded by 2^53-1 so that any implementation (JavaScript included) can
verify every event exactly.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    model_validator,
)

from agents.core.canonical import canonical_bytes, sha256_hex
from agents.core.clock import Timestamp
from agents.core.identity import BadPeerIdError, Identity, public_key_of

PROTOCOL_VERSION = 2
MAX_EVENT_BYTES = 32 * 1024
MAX_INT = 2**53 - 1  # the largest integer every implementation can hold exactly
MAX_ROUND = 1000  # rounds of a node, epochs of a leaf
MAX_ROSTER = 64
SIGNING_DOMAIN = b"swarm-plan/event/v2\n"

Role = Literal["client", "decomposer", "scorer", "executor", "observer"]
ROLES: tuple[Role, ...] = ("client", "decomposer", "scorer", "executor", "observer")

Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
PeerIdText = Annotated[str, StringConstraints(pattern=r"^12D3KooW[1-9A-HJ-NP-Za-km-z]{44}$")]
# 64 bytes in base64: the last character before "==" carries 2 bits, so only A, Q, g, w
# spell it canonically (any other would decode to the same bytes: 16 spellings of one event)
SIGNATURE_PATTERN = r"^[A-Za-z0-9+/]{85}[AQgw]==$"
Signature = Annotated[str, StringConstraints(pattern=SIGNATURE_PATTERN)]
Score = Annotated[int, Field(ge=1, le=5)]  # strict: true is not 1
Round = Annotated[int, Field(ge=1, le=MAX_ROUND)]
IdList = Annotated[tuple[Hex64, ...], Field(max_length=MAX_ROSTER)]


def _text(min_length: int, max_length: int) -> Any:
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class GoalBody(_Strict):
    """A goal to plan, with the roster of scorers whose quorum decides it and its timings.

    ``scorers`` is the roster (sorted, distinct); ``quorum`` must be a majority of it,
    so any two quorums share a scorer (PROTOCOL.md, section 4)."""

    kind: Literal["goal"] = "goal"
    text: _text(1, 2000)
    scorers: Annotated[tuple[PeerIdText, ...], Field(min_length=1, max_length=MAX_ROSTER)]
    quorum: Annotated[int, Field(ge=1, le=MAX_ROSTER)]
    max_depth: Annotated[int, Field(ge=1, le=6)]
    claim_lease_ms: Annotated[int, Field(ge=100, le=3_600_000)]
    hold_limit_ms: Annotated[int, Field(ge=100, le=86_400_000)]
    round_ms: Annotated[int, Field(ge=100, le=3_600_000)]

    @model_validator(mode="after")
    def _roster(self) -> GoalBody:
        if list(self.scorers) != sorted(set(self.scorers)):
            raise ValueError("scorers must be distinct peer ids in sorted order")
        for scorer in self.scorers:
            try:
                public_key_of(scorer)
            except BadPeerIdError as exc:
                raise ValueError(f"scorer {scorer}: {exc}") from None
        if not (2 * self.quorum > len(self.scorers) and self.quorum <= len(self.scorers)):
            raise ValueError(f"quorum {self.quorum} must be a majority of the {len(self.scorers)} scorers "
                             "(2 x quorum > scorers, quorum <= scorers)")
        if self.hold_limit_ms < self.claim_lease_ms:
            raise ValueError("hold_limit_ms must be at least claim_lease_ms")
        return self

    @property
    def tolerated_equivocators(self) -> int:
        """How many forking scorers the quorum tolerates: 2q - n - 1."""
        return 2 * self.quorum - len(self.scorers) - 1


class Subgoal(_Strict):
    title: _text(1, 120)
    description: _text(0, 1000) = ""
    executable: bool


class ProposalBody(_Strict):
    """A decomposer's proposed split of one node into 2 to 6 subgoals."""

    kind: Literal["proposal"] = "proposal"
    node: Hex64
    strategy: _text(1, 40)
    subgoals: Annotated[tuple[Subgoal, ...], Field(min_length=2, max_length=6)]
    model: _text(0, 120) = ""  # which model thought of it: "name@sha256-prefix"


class VoteBody(_Strict):
    """A scorer's assessment of one draft: rubric scores and whether it approves.
    Assessments decide nothing by themselves; ballots in rounds do."""

    kind: Literal["vote"] = "vote"
    proposal: Hex64
    clarity: Score
    non_overlap: Score
    coverage: Score
    approve: bool
    reason: _text(0, 500) = ""
    model: _text(0, 120) = ""


class PromiseBody(_Strict):
    """A scorer enters ``round`` of ``node``: it will not ballot in an earlier round."""

    kind: Literal["promise"] = "promise"
    node: Hex64
    round: Annotated[int, Field(ge=2, le=MAX_ROUND)]


class CandidateBody(_Strict):
    """The coordinator of a round names the value its scorers ballot on (a proposal on an
    inner node, a result on a leaf), with the promises (and, rarely, the certificate)
    that justify the choice."""

    kind: Literal["candidate"] = "candidate"
    node: Hex64
    round: Round
    value: Hex64
    promises: IdList = ()
    certificate: IdList = ()


class BallotBody(_Strict):
    """A scorer's one ballot in a round: for or against the round's candidate."""

    kind: Literal["ballot"] = "ballot"
    node: Hex64
    round: Round
    candidate: Hex64
    approve: bool


class ClaimBody(_Strict):
    """An executor's claim on a leaf for one epoch. Granted by a quorum of acks."""

    kind: Literal["claim"] = "claim"
    leaf: Hex64
    epoch: Round


class AckBody(_Strict):
    """A scorer acknowledges a claim: its one ack for that leaf and epoch."""

    kind: Literal["ack"] = "ack"
    leaf: Hex64
    claim: Hex64
    epoch: Round


class RenewBody(_Strict):
    """Extends the lease of the author's own claim, if sent before the lease ran out."""

    kind: Literal["renew"] = "renew"
    claim: Hex64


class ResultBody(_Strict):
    """The output of a leaf, produced under the author's granted claim; the roster's
    rounds on the leaf accept one result (PROTOCOL.md, section 7)."""

    kind: Literal["result"] = "result"
    leaf: Hex64
    claim: Hex64
    output: _text(1, 8000)
    model: _text(0, 120) = ""


class FailureBody(_Strict):
    """An executor gave up on a leaf: scorers may grant the next epoch at once."""

    kind: Literal["failure"] = "failure"
    leaf: Hex64
    claim: Hex64
    reason: _text(1, 500)


AnyBody = (GoalBody | ProposalBody | VoteBody | PromiseBody | CandidateBody | BallotBody | ClaimBody
           | AckBody | RenewBody | ResultBody | FailureBody)
Body = Annotated[AnyBody, Field(discriminator="kind")]
Kind = Literal["goal", "proposal", "vote", "promise", "candidate", "ballot", "claim", "ack", "renew",
               "result", "failure"]

AUTHOR_ROLE: dict[str, Role] = {
    "goal": "client",
    "proposal": "decomposer",
    "vote": "scorer",
    "promise": "scorer",
    "candidate": "scorer",
    "ballot": "scorer",
    "ack": "scorer",
    "claim": "executor",
    "renew": "executor",
    "result": "executor",
    "failure": "executor",
}


_as_timestamp = tuple.__new__  # ``Event.ts``: a Timestamp from a pair already known to be two ints


class Event(_Strict):
    """A signed, content-addressed event. Construct with ``sign_event`` or ``decode_event``."""

    v: Literal[2]
    author: PeerIdText
    role: Role
    ticket: Signature
    seq: Annotated[int, Field(ge=1, le=MAX_INT)]
    prev: Hex64 | None
    hlc: tuple[Annotated[int, Field(ge=0, le=MAX_INT)], Annotated[int, Field(ge=0, lt=2**31)]]
    body: Body
    id: Hex64
    sig: Signature
    # its canonical bytes, once known: an event is written to the store and served to
    # every puller, and encoding it again each time was a tenth of a catch-up
    _wire: bytes | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # the fields alone: the cached bytes are a function of them
        return isinstance(other, Event) and self.__dict__ == other.__dict__

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Event:
        # a copy with changed fields must not keep the original's bytes
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy._wire = None
        return copy

    @property
    def kind(self) -> Kind:
        return self.body.kind

    @property
    def ts(self) -> Timestamp:
        # the validated pair as it is, retyped: ``Timestamp(*self.hlc)`` cost a fold of 100k
        # events half a second, over the 125k times it reads a timestamp
        return _as_timestamp(Timestamp, self.hlc)

    @property
    def order_key(self) -> tuple[int, int, str, str]:
        """The total order all members agree on: timestamp, then author, then id."""
        return (self.hlc[0], self.hlc[1], self.author, self.id)

    def to_wire(self) -> bytes:
        """Canonical JSON bytes of the whole event, as sent, stored and written to files."""
        # the cache read from pydantic's own dict: ``self._wire`` takes its slow attribute path
        # (7 us here), paid for every event stored and every event served
        private = self.__pydantic_private__
        wire = private["_wire"]
        if wire is None:
            wire = private["_wire"] = canonical_bytes(self.model_dump(mode="json"))
        return wire

    def short(self) -> str:
        return f"{self.kind} {self.id[:10]} by {self.author[-6:]}#{self.seq}"


class EventRefused(ValueError):
    """An event that breaks a rule. ``rule`` is a short stable name; ``event`` says which one."""

    def __init__(self, rule: str, detail: str, event: str = "(unparsed)") -> None:
        self.rule = rule
        self.detail = detail
        self.event = event
        super().__init__(f"event {event} refused ({rule}): {detail}")


def _signing_bytes(unsigned: dict[str, Any]) -> bytes:
    return SIGNING_DOMAIN + canonical_bytes(unsigned)


def sign_event(
    identity: Identity,
    role: Role,
    seq: int,
    prev: str | None,
    hlc: Timestamp,
    body: AnyBody,
    ticket: str,
) -> Event:
    """Build, hash and sign an event by ``identity``, carrying its admission ``ticket``."""
    unsigned = {
        "v": PROTOCOL_VERSION,
        "author": identity.peer_id,
        "role": role,
        "ticket": ticket,
        "seq": seq,
        "prev": prev,
        "hlc": [hlc.ms, hlc.counter],
        "body": body.model_dump(mode="json"),
    }
    message = _signing_bytes(unsigned)
    signature = base64.b64encode(identity.sign(message)).decode("ascii")
    event = Event.model_validate(
        {**unsigned, "hlc": (hlc.ms, hlc.counter), "body": body, "id": sha256_hex(message), "sig": signature},
        strict=False,
    )
    check_envelope(event)
    return event


def check_envelope(event: Event) -> None:
    ref = event.id[:16]
    expected = AUTHOR_ROLE[event.kind]
    if event.role != expected:
        raise EventRefused(
            "role", f"a {event.kind} must be authored by a {expected}, not a {event.role}", ref
        )
    if (event.seq == 1) != (event.prev is None):
        raise EventRefused(
            "chain", "prev must be null exactly when seq is 1 (the first event of a feed)", ref
        )



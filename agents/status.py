"""The status channel: what each member is doing now, beside the plan and never in it.

A member's plan events say what it decided; they do not say that it is alive, or that it
has been thinking about a split for 45 s. That goes on a second gossip topic,
``swarm/<cluster>/status/1`` (PROTOCOL.md, section 12): every ``STATUS_EVERY_S`` each
admitted member gossips one small signed message about itself. Nobody stores or folds
them, so they can never change a plan or its digest; a reader keeps the newest per peer
and calls a member unreachable when it has heard nothing for ``STALE_AFTER_S``.

A status is believed only when it is signed by the peer it describes and carries that
peer's admission ticket for this cluster and role: a sybil key cannot appear on the page.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import trio

from agents.core.canonical import canonical_bytes
from agents.core.identity import verify

if TYPE_CHECKING:
    from agents.core.admission import Credentials, Gate
    from agents.member import Member

STATUS_VERSION = 1
MAX_STATUS_BYTES = 4096
STATUS_EVERY_S = 2.0
STATUS_MIN_GAP_S = 0.5
STALE_AFTER_S = 5 * STATUS_EVERY_S  # py-libp2p gossip at 11 members: a status can take 4-5 s
_FIELDS = {"v": int, "cluster": str, "peer": str, "role": str, "ticket": str, "at": int, "doing": str,
           "about": str, "since": int, "model_calls": int, "tokens": int, "events": int, "refused": int,
           "held": int}
_DOINGS = ("idle", "decompose", "score", "execute", "watch", "mute")


class StatusError(ValueError):
    """A status message that is not believed; the reason names the rule it broke."""


@dataclass(frozen=True)
class Status:
    peer: str
    role: str
    at: int  # the author's wall ms when it was sent
    doing: str  # one of _DOINGS
    about: str  # the node or proposal it is thinking about ("" when idle)
    since: int  # its wall ms when it started doing it
    model_calls: int
    tokens: int
    events: int  # events it holds
    refused: int
    held: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status_of(member: Member, now_ms: int) -> dict[str, Any]:
    """The unsigned status record of ``member`` now."""
    if member.doing is not None:
        doing, about, since = member.doing
    else:
        doing, about, since = ("watch" if member.role == "observer" else "mute" if member.mute else "idle"), "", now_ms
    return {"v": STATUS_VERSION, "cluster": member.cluster, "peer": member.credentials.identity.peer_id,
            "role": member.role, "ticket": member.credentials.ticket.sig, "at": now_ms, "doing": doing,
            "about": about, "since": since, "model_calls": member.stats.model_calls,
            "tokens": int(getattr(member.backend, "tokens", 0) or 0), "events": len(member.index),
            "refused": member.stats.refused, "held": member.intake.held}


def sign_status(credentials: Credentials, record: dict[str, Any]) -> bytes:
    """Wire bytes: the record's canonical JSON with ``sig`` (base64 ed25519 over the rest)."""
    sig = credentials.identity.sign(canonical_bytes(record))
    return canonical_bytes({**record, "sig": base64.b64encode(sig).decode("ascii")})


def read_status(raw: bytes, gate: Gate) -> Status:
    """Decode and check one status message; StatusError names what is wrong."""
    if len(raw) > MAX_STATUS_BYTES:
        raise StatusError(f"size: {len(raw)} bytes, over {MAX_STATUS_BYTES}")
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise StatusError(f"json: {exc}") from None
    if not isinstance(record, dict) or set(record) != {*_FIELDS, "sig"}:
        raise StatusError("schema: not an object with exactly the status fields")
    for name, kind in _FIELDS.items():
        if type(record[name]) is not kind:
            raise StatusError(f"schema: {name} is not {kind.__name__}")
    if record["v"] != STATUS_VERSION or record["doing"] not in _DOINGS or not isinstance(record["sig"], str):
        raise StatusError("schema: unknown version or activity")
    if record["cluster"] != gate.cluster:
        raise StatusError(f"cluster: for {record['cluster']!r}, not {gate.cluster!r}")
    try:
        sig = base64.b64decode(record.pop("sig"), validate=True)
    except (binascii.Error, ValueError):
        raise StatusError("signature: not base64") from None
    if not verify(record["peer"], canonical_bytes(record), sig):
        raise StatusError("signature: not the peer's own")
    if not gate.admits(record["peer"], record["role"], record["ticket"]):
        raise StatusError("ticket: the peer is not admitted in this role")
    return Status(**{k: record[k] for k in Status.__dataclass_fields__})


class StatusBoard:
    """The newest believed status of each peer, and when it arrived (this process's clock)."""

    def __init__(self, gate: Gate, clock=time.monotonic) -> None:
        self.gate = gate
        self.clock = clock
        self.latest: dict[str, tuple[Status, float]] = {}
        self.refused: dict[str, int] = {}  # by rule
        self.changed = trio.Event()

    def screen(self, raw: bytes) -> bool:
        """The gossip validator: keep and forward only believed, newer statuses."""
        try:
            status = read_status(raw, self.gate)
        except StatusError as exc:
            rule = str(exc).split(":", 1)[0]
            self.refused[rule] = self.refused.get(rule, 0) + 1
            return False
        known = self.latest.get(status.peer)
        if known is not None and known[0].at >= status.at:
            return False  # a replay or an older one: nothing new to forward
        self.note(status)
        return True

    def note(self, status: Status) -> None:
        self.latest[status.peer] = (status, self.clock())
        self.changed.set()
        self.changed = trio.Event()

    def members(self) -> list[dict[str, Any]]:
        """Every peer heard from, with ``alive`` and ``heard_s_ago``, by role then peer."""
        now = self.clock()
        rows = []
        for status, heard in self.latest.values():
            ago = now - heard
            rows.append({**status.to_json(), "alive": ago <= STALE_AFTER_S, "heard_s_ago": round(ago, 1)})
        return sorted(rows, key=lambda r: (r["role"], r["peer"]))


async def publish_statuses(member: Member, network) -> None:
    """Gossip this member's status when what it is doing changes (at most every
    ``STATUS_MIN_GAP_S``) and at least every ``STATUS_EVERY_S``. The topic validator runs
    on our own messages too, so a board on this process notes ours as it goes out."""
    sent: tuple[str, str] | None = None
    last = -STATUS_EVERY_S
    while True:
        record = status_of(member, member.now_ms())
        now = trio.current_time()
        if (record["doing"], record["about"]) != sent or now - last >= STATUS_EVERY_S:
            sent, last = (record["doing"], record["about"]), now
            with contextlib.suppress(Exception):  # best-effort like all gossip; the next one comes soon
                await network.publish_status(sign_status(member.credentials, record))
        await trio.sleep(STATUS_MIN_GAP_S)


async def read_statuses(network) -> None:
    """Statuses that passed the validator are already on the board; drain the channel."""
    async for _raw in network.statuses:
        pass

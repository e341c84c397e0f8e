"""The status channel: what each member is doing now, beside the plan and never in it.

A member's plan events say what it decided; they do not say that it is alive, or that it
has been thinking about a split for 45 s. That goes on a second gossip topic,
``swarm/<cluster>/status/1`` (PROTOCOL.md, section 12): each admitted member gossips one
small signed message about itself when what it does changes, and as a heartbeat every
``heartbeat_every(members)`` seconds: ``STATUS_EVERY_S`` in a small cluster, longer in a
big one, so that the whole cluster sends at most ``CLUSTER_HEARTBEATS`` a second (each
status reaches every member: at 2 s each, 21 idle members spent both cores of this
machine on statuses alone). Nobody stores or folds them, so they can never change a
plan or its digest; a reader keeps the newest per peer and calls a member unreachable
when it has heard nothing for ``stale_after(members)``: five heartbeats.

A status is believed only when it is signed by the peer it describes and carries that
peer's admission ticket for this cluster and role: a sybil key cannot appear on the page.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import trio

from agents.beats import Beats
from agents.core.admission import Gate
from agents.core.canonical import NotCanonicalError, canonical_bytes
from agents.core.identity import verify

if TYPE_CHECKING:
    from agents.core.admission import Credentials
    from agents.member import Member

STATUS_VERSION = 1
MAX_STATUS_BYTES = 4096
STATUS_EVERY_S = 2.0  # a member's heartbeat in a cluster of up to 2 * CLUSTER_HEARTBEATS members
# heartbeat statuses a second from the whole cluster, at most: each reaches every member
# about as many times as its mesh has peers, so at 4 a second 21 idle members spent most of
# their CPU on statuses (9% of a core each, with pings and pulls); at 2, and with the other
# idle savings, 2.8%
CLUSTER_HEARTBEATS = 2.0
STATUS_MIN_GAP_S = 0.5
# a heartbeat comes after heartbeat_every times 1 +- this: fifty members started together beat
# in the same second every 25 s, each status reaching every member, and saturated both cores
# for seconds (``agents.beats``); readers call a member stale only after five heartbeats
BEAT_JITTER = 0.5
MIN_GAP_MS = int(STATUS_MIN_GAP_S * 1000 * 0.8)  # a peer's statuses closer than this are refused (rate)
FRESH_MS = 60_000  # a status stamped further than this from the reader's clock is refused (stale)


def heartbeat_every(members: int) -> float:
    """Seconds between one member's heartbeat statuses in a cluster of ``members``."""
    return max(STATUS_EVERY_S, members / CLUSTER_HEARTBEATS)


def stale_after(members: int) -> float:
    """Seconds of silence after which a reader calls a member unreachable: five heartbeats
    (py-libp2p gossip at 11 members: a status can take 4-5 s to arrive)."""
    return 5 * heartbeat_every(members)
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
        canonical = canonical_bytes(record)
    except NotCanonicalError as exc:  # a lone surrogate escaped into a string: no bytes can say it
        raise StatusError(f"canonical: {exc}") from None
    if raw != canonical:
        raise StatusError("canonical: not the canonical encoding of its fields")
    text = record.pop("sig")
    try:
        sig = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StatusError("signature: not base64") from None
    if len(sig) != 64 or base64.b64encode(sig).decode("ascii") != text:
        raise StatusError("signature: not 64 bytes in canonical base64")
    if not verify(record["peer"], canonical_bytes(record), sig):
        raise StatusError("signature: not the peer's own")
    if not gate.admits(record["peer"], record["role"], record["ticket"]):
        raise StatusError("ticket: the peer is not admitted in this role")
    return Status(**{k: record[k] for k in Status.__dataclass_fields__})


class StatusBoard:
    """The newest believed status of each peer, and when it arrived (``clock``: this
    process's monotonic seconds; ``wall``: its wall ms, to judge freshness)."""

    def __init__(self, gate: Gate, clock=time.monotonic, wall=lambda: int(time.time() * 1000),
                 on_status: Callable[[Status], None] | None = None) -> None:
        # a gate of its own: its ticket cache is not the event intake's, so sybil statuses
        # cannot push honest authors' verdicts out of the cache the plan depends on
        self.gate = Gate(gate.cluster, gate.authority)
        self.clock = clock
        self.wall = wall
        self.latest: dict[str, tuple[Status, float]] = {}
        self.refused: dict[str, int] = {}  # by rule
        self.changed = trio.Event()
        self.on_status = on_status  # told of each believed status (a member: does the peer hold more?)

    def _refuse(self, rule: str) -> bool:
        self.refused[rule] = self.refused.get(rule, 0) + 1
        return False

    def screen(self, raw: bytes) -> bool:
        """The gossip validator: keep and forward only believed, fresh, newer statuses, at
        most one per peer every ``MIN_GAP_MS``; every refusal is counted by rule."""
        try:
            status = read_status(raw, self.gate)
        except StatusError as exc:
            return self._refuse(str(exc).split(":", 1)[0])
        if abs(status.at - self.wall()) > FRESH_MS:
            return self._refuse("stale")  # a recording replayed, or a clock far off
        known = self.latest.get(status.peer)
        if known is not None:
            if known[0].at >= status.at:
                return self._refuse("replay")
            if status.at - known[0].at < MIN_GAP_MS:
                return self._refuse("rate")
        self.note(status)
        return True

    def note(self, status: Status) -> None:
        self.latest[status.peer] = (status, self.clock())
        if self.on_status is not None:
            self.on_status(status)
        self.changed.set()
        self.changed = trio.Event()

    def members(self, expected: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every peer heard from, and every ``expected`` one (peer -> role) never heard, with
        ``alive``; how long it has been doing what it does (``doing_s``, whole seconds); how
        long it has been silent when it is not alive. By role, then peer."""
        now = self.clock()
        rows = []
        bound = stale_after(len(set(self.latest) | set(expected or {})))
        for status, heard in self.latest.values():
            ago = now - heard
            alive = ago <= bound
            busy = status.doing not in ("idle", "watch", "mute")
            row = {k: v for k, v in status.to_json().items() if k not in ("at", "since")}
            rows.append({**row, "alive": alive,
                         "doing_s": int((status.at - status.since) / 1000 + ago) if busy else 0,
                         "silent_s": None if alive else int(ago)})
        for peer, role in (expected or {}).items():
            if peer not in self.latest:
                rows.append({"peer": peer, "role": role, "doing": "never heard", "about": "", "model_calls": 0,
                             "tokens": 0, "events": 0, "refused": 0, "held": 0, "alive": False, "doing_s": 0,
                             "silent_s": None})
        return sorted(rows, key=lambda r: (r["role"], r["peer"]))


async def publish_statuses(member: Member, network, board: StatusBoard | None = None) -> None:
    """Gossip this member's status when what it is doing changes (at most every
    ``STATUS_MIN_GAP_S``) and at least every ``heartbeat_every`` for the cluster's size as
    this member knows it: the peers ``board`` heard statuses from (itself included), or
    those it is connected to and itself if that is more (a member connects to a bounded
    few of a large cluster, which must not make every member beat faster). The topic
    validator runs on our own messages too, so a board on this process notes ours as it
    goes out."""
    sent: tuple[str, str] | None = None
    last = float("-inf")
    beats = Beats(member.credentials.identity.peer_id, "status heartbeats", BEAT_JITTER)
    stretch = 1.0  # this heartbeat's share of ``every``: drawn anew at each send, so never in step
    while True:
        record = status_of(member, member.now_ms())
        now = trio.current_time()
        every = heartbeat_every(max(len(network.connected_peers()) + 1, len(board.latest) if board else 0))
        if (record["doing"], record["about"]) != sent or now - last >= every * stretch:
            sent, last, stretch = (record["doing"], record["about"]), now, beats.factor()
            with contextlib.suppress(Exception):  # best-effort like all gossip; the next one comes soon
                await network.publish_status(sign_status(member.credentials, record))
        await trio.sleep(STATUS_MIN_GAP_S)


async def read_statuses(network) -> None:
    """Statuses that passed the validator are already on the board; drain the channel."""
    async for _raw in network.statuses:
        pass

"""Receipt of events from elsewhere: decode, authenticate, admit, and hold what is too far ahead.

``Intake.offer`` answers one of three things for raw bytes from a peer or a file:

* ``Admitted``: valid, by an admitted author; the clock has merged its
  timestamp. Store and fold it.
* ``Held``: valid, but stamped more than the drift bound ahead of our physical
  clock. Refusing it for good would make members disagree forever (another
  member, or this one a few seconds later, would accept it), so it waits here
  and ``release_due`` admits it once our clock has caught up.
* ``Refused``: breaks a rule that no amount of waiting fixes (size, JSON,
  schema, role, chain fields, peer id, id, signature, ticket), or is refused
  *for now*: stamped beyond the holding horizon, or beyond the holding budget
  (per author and in all). What is refused for now is remembered with its
  timestamp, so sync does not fetch it again by id until its time has come (a
  run asked by seq brings it again: see ``agents.syncproto``); what is
  refused for good is remembered too, so the same bad event offered again is
  counted once. Nothing already stored is touched.

Memory stays bounded: at most ``MAX_HELD`` held events (``MAX_HELD_PER_AUTHOR``
per author) and ``MAX_REMEMBERED`` remembered ids.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from dataclasses import dataclass

from agents.core.admission import Gate
from agents.core.clock import ClockDriftError, HybridClock
from agents.core.decode import decode_event
from agents.core.events import Event, EventRefused

HOLD_HORIZON_MS = 10 * 60 * 1000  # held at most this far ahead; further is refused for now
MAX_HELD = 10_000
MAX_HELD_PER_AUTHOR = 256
MAX_REMEMBERED = 100_000


@dataclass(frozen=True)
class Admitted:
    event: Event


@dataclass(frozen=True)
class Held:
    event: Event
    reason: str


@dataclass(frozen=True)
class Refused:
    rule: str
    reason: str
    first: bool = True  # False when this very event was refused before (count it once)


Admission = Admitted | Held | Refused


class Intake:
    def __init__(self, clock: HybridClock, gate: Gate | None) -> None:
        """``gate`` checks tickets; None only for tools that read files of any cluster."""
        self.clock = clock
        self.gate = gate
        self._held: dict[str, Event] = {}
        self._held_by_author: Counter[str] = Counter()
        self._later: OrderedDict[str, int] = OrderedDict()  # refused for now: id -> its ms
        self._bad: OrderedDict[str, str] = OrderedDict()  # refused for good: id -> rule
        # bytes that did not decode, by their sha256 (never by the id they claim, which anyone
        # could copy to get an honest event refused): the same bad bytes are counted once
        self._bad_bytes: OrderedDict[bytes, str] = OrderedDict()
        self._screened: OrderedDict[bytes, Event] = OrderedDict()  # raw digest -> event, for offer()
        self.refused: Counter[str] = Counter()  # by rule, each event once

    @property
    def held(self) -> int:
        return len(self._held)

    def knows(self, event_id: str, now_ms: int | None = None) -> bool:
        """True for ids sync need not fetch: held, refused for good, or refused until later."""
        if event_id in self._held or event_id in self._bad:
            return True
        due = self._later.get(event_id)
        if due is None:
            return False
        if (now_ms if now_ms is not None else self.clock.physical_ms()) + HOLD_HORIZON_MS >= due:
            del self._later[event_id]  # its time has come: fetch it again
            return False
        return True

    def _remember(self, table: OrderedDict, event_id: str, value: object) -> None:
        table[event_id] = value
        table.move_to_end(event_id)
        while len(table) > MAX_REMEMBERED:
            table.popitem(last=False)

    def _refuse(self, rule: str, reason: str, event_id: str | None, *, later_ms: int | None = None) -> Refused:
        first = event_id is None or (event_id not in self._bad and event_id not in self._later)
        if first:
            self.refused[rule] += 1
        if event_id is not None:
            if later_ms is None:
                self._remember(self._bad, event_id, rule)
            else:
                self._remember(self._later, event_id, later_ms)
        return Refused(rule, reason, first)

    def refuse_bytes(self, raw: bytes, exc: EventRefused) -> Refused:
        """Count bytes that did not decode, once per distinct bytes."""
        digest = hashlib.sha256(raw).digest()
        first = digest not in self._bad_bytes
        if first:
            self.refused[exc.rule] += 1
        self._remember(self._bad_bytes, digest, exc.rule)  # type: ignore[arg-type]
        return Refused(exc.rule, str(exc), first)

    def screen(self, raw: bytes) -> Refused | None:
        """The gossip validator: None when these bytes may be relayed, else the refusal
        (counted by rule, once per event). Decodes, verifies and checks the ticket; does not
        touch the clock. The decoded event is kept briefly, so ``offer`` of the same bytes
        does not verify again."""
        try:
            event = decode_event(raw)
        except EventRefused as exc:
            return self.refuse_bytes(raw, exc)
        if event.id in self._bad:
            return Refused(self._bad[event.id], f"event {event.id[:16]} was refused before", False)
        if self.gate is not None and not self.gate.admits(event.author, event.role, event.ticket):
            return self._refuse("ticket", f"event {event.id[:16]} refused (ticket): its author {event.author[-8:]} "
                                f"holds no ticket of this cluster as {event.role}", event.id)
        self._screened[hashlib.sha256(raw).digest()] = event
        while len(self._screened) > 1024:
            self._screened.popitem(last=False)
        return None

    def offer(self, raw: bytes) -> Admission:
        event = self._screened.pop(hashlib.sha256(raw).digest(), None)
        if event is None:
            try:
                event = decode_event(raw)
            except EventRefused as exc:
                return self.refuse_bytes(raw, exc)
        return self.admit(event)

    def admit(self, event: Event) -> Admission:
        """Check the ticket and apply the drift rule to an already decoded, verified event."""
        if event.id in self._bad:
            return Refused(self._bad[event.id], f"event {event.id[:16]} was refused before", False)
        if self.gate is not None and not self.gate.admits(event.author, event.role, event.ticket):
            return self._refuse("ticket", f"event {event.id[:16]} refused (ticket): its author "
                                f"{event.author[-8:]} holds no ticket of this cluster as {event.role}", event.id)
        if event.id in self._held:
            return Held(event, f"event {event.id[:16]} is already held")
        try:
            self.clock.observe(event.ts)
        except ClockDriftError as exc:
            return self._hold(event, exc)
        return Admitted(event)

    def _hold(self, event: Event, exc: ClockDriftError) -> Admission:
        ahead = exc.remote.ms - exc.physical_ms
        if ahead > HOLD_HORIZON_MS:
            return self._refuse("future", f"event {event.id[:16]} refused for now (future): stamped {ahead} ms "
                                f"ahead, beyond the {HOLD_HORIZON_MS} ms holding horizon", event.id,
                                later_ms=event.ts.ms)
        if len(self._held) >= MAX_HELD or self._held_by_author[event.author] >= MAX_HELD_PER_AUTHOR:
            return self._refuse("hold-full", f"event {event.id[:16]} refused for now (hold-full): "
                                f"{self._held_by_author[event.author]} events of {event.author[-8:]} and "
                                f"{len(self._held)} in all are held already", event.id, later_ms=event.ts.ms)
        self._held[event.id] = event
        self._held_by_author[event.author] += 1
        return Held(event, f"event {event.id[:16]} held: {exc}")

    def release_due(self) -> list[Event]:
        """Held events whose time has come, now merged into the clock."""
        due = []
        for event_id, event in sorted(self._held.items(), key=lambda item: item[1].order_key):
            try:
                self.clock.observe(event.ts)
            except ClockDriftError:
                break  # in timestamp order: the rest are later still
            del self._held[event_id]
            self._held_by_author[event.author] -= 1
            due.append(event)
        return due

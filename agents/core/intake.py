"""Receipt of events from elsewhere: decode, authenticate, and hold what is too far ahead.

``Intake.offer`` answers one of three things for raw bytes from a peer or a file:

* ``Admitted``: valid; the clock has merged its timestamp. Store and fold it.
* ``Held``: valid, but stamped more than the drift bound ahead of our physical
  clock. Refusing it for good would make members disagree forever (another
  member, or this one a few seconds later, would accept it), so it waits here
  and ``release_due`` admits it once our clock has caught up.
* ``Refused``: breaks a rule that no amount of waiting fixes (size, JSON,
  schema, role, chain fields, peer id, id, signature). The reason names the
  event and the rule. Nothing already stored is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.core.clock import ClockDriftError, HybridClock
from agents.core.events import Event, EventRefused, decode_event


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


Admission = Admitted | Held | Refused


class Intake:
    def __init__(self, clock: HybridClock) -> None:
        self.clock = clock
        self._held: dict[str, Event] = {}
        self.refused = 0

    @property
    def held(self) -> int:
        return len(self._held)

    def offer(self, raw: bytes) -> Admission:
        try:
            event = decode_event(raw)
        except EventRefused as exc:
            self.refused += 1
            return Refused(exc.rule, str(exc))
        return self.admit(event)

    def admit(self, event: Event) -> Admission:
        """Apply the drift rule to an already decoded, verified event."""
        try:
            self.clock.observe(event.ts)
        except ClockDriftError as exc:
            self._held[event.id] = event
            return Held(event, f"event {event.id[:16]} held: {exc}")
        return Admitted(event)

    def release_due(self) -> list[Event]:
        """Held events whose time has come, now merged into the clock."""
        due = []
        for event_id, event in sorted(self._held.items(), key=lambda item: item[1].order_key):
            try:
                self.clock.observe(event.ts)
            except ClockDriftError:
                continue
            del self._held[event_id]
            due.append(event)
        return due

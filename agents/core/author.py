"""A member's own feed: the next sequence number, the previous id, its clock and its ticket."""

from __future__ import annotations

from agents.core.clock import HybridClock
from agents.core.events import AnyBody, Event, Role, sign_event
from agents.core.identity import Identity


class Author:
    """Signs this member's events in feed order. ``resume`` after a restart, from the store.

    A member must never sign two events at one seq (that is equivocation, proof of
    misbehaviour to every other member): ``resume`` continues after the highest own
    event it is shown, and a member whose store holds none of its own events learns
    them from a peer before it signs anything (``agents.member``)."""

    def __init__(self, identity: Identity, role: Role, clock: HybridClock, ticket: str) -> None:
        self.identity = identity
        self.role = role
        self.clock = clock
        self.ticket = ticket
        self.seq = 0
        self.prev: str | None = None

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    def resume(self, own_events: list[Event]) -> None:
        """Continue the feed after its last known event, and never stamp earlier than it."""
        if own_events:
            last = max(own_events, key=lambda e: (e.seq, e.id))
            if last.seq > self.seq:
                self.seq, self.prev = last.seq, last.id
            self.clock.restore(max(e.ts for e in own_events))

    def unsign(self, event: Event) -> None:
        """Take back the last event signed, which was never stored nor sent (a full disk):
        the next event reuses its seq, and since nobody saw this one, that is no fork."""
        assert (event.seq, event.id) == (self.seq, self.prev), "only the last event signed can be taken back"
        self.seq, self.prev = event.seq - 1, event.prev

    def sign(self, body: AnyBody) -> Event:
        event = sign_event(self.identity, self.role, self.seq + 1, self.prev, self.clock.tick(), body, self.ticket)
        self.seq, self.prev = event.seq, event.id
        return event

"""A member's own feed: the next sequence number, the previous id, and its clock."""

from __future__ import annotations

from agents.core.clock import HybridClock
from agents.core.events import AnyBody, Event, Role, sign_event
from agents.core.identity import Identity


class Author:
    """Signs this member's events in feed order. ``resume`` after a restart, from the store."""

    def __init__(self, identity: Identity, role: Role, clock: HybridClock) -> None:
        self.identity = identity
        self.role = role
        self.clock = clock
        self.seq = 0
        self.prev: str | None = None

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    def resume(self, own_events: list[Event]) -> None:
        """Continue the feed after its last stored event, and never stamp earlier than it."""
        if own_events:
            last = max(own_events, key=lambda e: e.seq)
            self.seq, self.prev = last.seq, last.id
            self.clock.restore(last.ts)

    def sign(self, body: AnyBody) -> Event:
        event = sign_event(self.identity, self.role, self.seq + 1, self.prev, self.clock.tick(), body)
        self.seq, self.prev = event.seq, event.id
        return event

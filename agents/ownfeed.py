"""A member's own feed across restarts: when it may sign, so that it never forks itself.

A member must never sign two events at one seq: that is equivocation, proof of
misbehaviour to every other member. Its store is what tells it where its feed
stands, and a store can be lost, damaged, or (after a power cut, were its own events
ever committed without an fsync: ``agents.member`` commits them with one) miss its
tail. So the member also records its feed's head (seq and id) in a small file beside
the store, atomically and durably, after each own event is stored, and it
signs nothing until its fold holds its whole own chain up to that head: from the
store, or given back by peers. With no record and no own events, a brand-new
member (its key made at this start) first completes one sync; a member whose key
existed (its whole data directory but the key was lost) completes syncs with two
different peers, or with every peer it can reach if fewer, so that one peer that
never saw its events cannot make it start again at seq 1. A member whose lost
events nobody else held stays silent and says so: signing again would fork it.
"""

from __future__ import annotations

from pathlib import Path

import trio

from agents.core.author import Author
from agents.core.events import Event
from agents.core.tree import PlanTree
from agents.durable import replace_durably
from agents.store import DiskFailed

Head = tuple[int, str]  # (seq, id)


def read_head(path: Path | None) -> Head | None:
    """The head a member recorded for its own feed, or None."""
    if path is None or not path.exists():
        return None
    try:
        seq, event_id = path.read_text().split()
        return int(seq), event_id
    except (OSError, ValueError):
        return None  # a damaged record: the first completed sync decides, as for a new member


class OwnFeed:
    """Whether ``author`` may sign now (``ready``), and what it waits for (``missing``)."""

    def __init__(self, author: Author, head_path: Path | None, new_key: bool = False) -> None:
        self.author = author
        self.head_path = head_path
        self.missing: Head | None = read_head(head_path)
        self.ready = trio.Event()
        self.new_key = new_key
        self.pulled_from: set[str] = set()

    def holds(self, head: Head, tree: PlanTree) -> bool:
        """The fold holds our whole chain up to ``head`` (our feed reaches its seq with no hole:
        an honest member's feed is one chain, so the event there is the head)."""
        ours = tree.heads.get(self.author.peer_id)
        return ours is not None and ours[0] >= head[0]

    def start(self, own: list[Event], tree: PlanTree) -> bool:
        """At start, from the store: True when the member may sign at once."""
        self.author.resume(own)
        if own and (self.missing is None or self.holds(self.missing, tree)):
            self.missing = None
            self.ready.set()
        return self.ready.is_set()

    def learned(self, own: list[Event], tree: PlanTree, peer: str, reachable: int) -> bool:
        """After a completed sync with ``peer`` (``reachable`` peers in all): True when the member
        just became ready to sign."""
        self.pulled_from.add(peer)
        if self.ready.is_set() or (self.missing is not None and not self.holds(self.missing, tree)):
            return False
        if self.missing is None and not own and not self.new_key \
                and len(self.pulled_from) < min(2, max(reachable, 1)):
            return False  # an old key with nothing on record: ask a second peer first
        self.author.resume(own)
        self.missing = None
        self.ready.set()
        return True

    def signed(self, event: Event, tree: PlanTree) -> bool:
        """Record our new head once the event is stored; False (and stop signing) when the event
        did not enter our own feed (a hole before it): signing on would never show in our tree."""
        if self.head_path is not None:  # the rename too: a head a power cut took back would let a
            # member whose store was lost with it sign again at a seq it used
            try:
                replace_durably(self.head_path, f"{event.seq} {event.id}\n".encode())
            except OSError as exc:
                raise DiskFailed(f"cannot record this member's feed head in {self.head_path}: {exc.strerror}; "
                                 "the member stops rather than sign on without it (free space on the disk "
                                 "or check it, then restart the member: its events are kept)") from None
        if tree.heads.get(self.author.peer_id) == (event.seq, event.id):
            return True
        self.missing = (event.seq, event.id)
        self.ready = trio.Event()
        return False

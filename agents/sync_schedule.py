"""When and from whom a member pulls: the sync schedule.

A mixin of ``agents.member.Member`` beside ``agents.syncing.MemberSync``, which runs the
pulls it starts; the parameters (``SYNC_INTERVAL``, ``SYNC_FANOUT``, ``QUIET_AFTER`` ...)
live there, beside the deadlines they are measured against.

* every ``SYNC_INTERVAL`` on average the member pulls from the next ``SYNC_FANOUT`` peers of a
  rotation of its own, and from a new connection while fewer pulls run; once no pull has
  brought it anything new for ``QUIET_AFTER``, only every ``QUIET_SYNC_INTERVAL``. The
  rotation is the repair of what gossip lost, so what gossip delivers does not quicken it:
  while gossip keeps up (an idle cluster, or a busy one whose gossip loses nothing) its pulls
  find nothing and were most of what a member cost. A pull that brings something new (gossip
  lost it: a lossy link, a heal, a joiner; or one that merely beat gossip to it) brings the
  short interval back; a gap in a feed still pulls at once, and so do a new connection and a
  status saying a peer holds more, and a muted member or one with such peers left to pull
  is never quiet (unless its store refuses writes, a full disk: then it pulls only every
  ``QUIET_SYNC_INTERVAL``, what it pulled could not be kept). The price: an author's *last*
  event that gossip lost (no later event of its shows the gap) reaches the others through
  statuses (its count above theirs: the next of its heartbeats, ``heartbeat_every``) or the
  quiet rotation, not within the 3 s rounds that any gossiped event used to buy.
  Measured (stop 43's note): fifty members on two cores, ``bench.swarm.propagation(50)``,
  members' CPU per delivery 8.0, 8.8, 11.5 ms (p99 702, 539, 932 ms) when every new event
  quickened the rotation, 5.6 ms (p99 355 ms) with this rule, and 12.8 ms (p99 2,759 ms) in
  a run where one member's gossip failed and sync brought it 23 of the 40 probes;
* a peer whose status says it holds more events than this member does is pulled from at
  once (``peer_holds``): a member left behind when the plan went quiet (its gossip lost
  to a starved machine) learns so from the next heartbeat, not from the slow rotation.
  Such peers take at most ``SYNC_FANOUT - 1`` places of a round, the rotation the rest:
  a status may lie, and a liar buys no more than a pull from itself per ``SYNC_INTERVAL``
  (one place in a round, and a round every ``SYNC_INTERVAL`` while the member is quiet);
* the sync loop wakes every ``SYNC_INTERVAL`` on average, each wake drawn apart by
  ``WAKE_JITTER`` (``agents.beats``): members started together, or gone quiet together when a
  plan ended, woke in the same second and pulled all at once (fifty members: 75 pulls in one
  second every ``QUIET_SYNC_INTERVAL``, both cores saturated, and a probe gossiped then was
  seconds late).
"""

from __future__ import annotations

import bisect
import hashlib

import trio

from agents.beats import Beats
from agents.syncing import (
    QUIET_AFTER,
    QUIET_SYNC_INTERVAL,
    REFUSED_QUIET,
    SYNC_FANOUT,
    SYNC_INTERVAL,
    WAKE_JITTER,
    WEDGED_AFTER,
)


class SyncSchedule:
    """The sync schedule for ``Member``: see the module's docstring. Its state (``_pulling``,
    ``_pull_done``, ``_pull_wanted``, ``_asked_pull``, ``_pull_after``, ``_ring_keys``,
    ``_wedged``, ``repaired_at``, ``store_refused_at``, ``sync_now``) is set by
    ``Member.__init__``; the pulls it starts run in ``agents.syncing.MemberSync``."""

    def peer_holds(self, peer: str, events: int) -> None:
        """``peer`` says (a believed status) that it holds ``events`` events: if that is more
        than this member holds, it lacks some of them; pull from that peer at the next wake."""
        now = trio.current_time()
        if now - self.store_refused_at < REFUSED_QUIET:
            return  # what it would pull cannot be stored yet: the quiet rotation pulls once it can
        if events > len(self.index) and now - self._asked_pull.get(peer, float("-inf")) >= SYNC_INTERVAL \
                and peer in self.network.connected_peers():
            if len(self._asked_pull) > 4096:  # peers come and go: keep the memo bounded
                self._asked_pull.clear()
            self._asked_pull[peer] = now
            self._pull_wanted.add(peer)
            self.sync_now.set()

    async def _connection_loop(self, nursery: trio.Nursery) -> None:
        """A newly connected peer (a start, a heal) is pulled from at once, unless
        ``SYNC_FANOUT`` pulls already run: a member joining fifty peers asks three, not fifty,
        for the same events; the rotation reaches the others."""
        async for peer in self.network.connections:
            if len(self._pulling) < SYNC_FANOUT:
                self._start_pull(nursery, peer)

    async def _sync_loop(self, nursery: trio.Nursery) -> None:
        """Every ``SYNC_INTERVAL`` (sooner when asked; every ``QUIET_SYNC_INTERVAL`` while
        pulls bring nothing new), pull from the next ``SYNC_FANOUT`` connected peers in this
        member's rotation (``_next_pulls``), so the pulls a cluster makes grow with its
        members, not with their square. Pulls are never awaited together: one that cannot be
        cancelled (a transport that shields its cleanup from us) holds up its own peer and no
        other."""
        last_round = trio.current_time() - QUIET_SYNC_INTERVAL  # the first round comes at the first wake
        wakes = Beats(self.network.peer_id, "sync wakes", WAKE_JITTER)
        while True:
            with trio.move_on_after(wakes.next(SYNC_INTERVAL)) as wait:
                await self.sync_now.wait()
            self._drop_wedged_pulls()  # at every wake, quiet or not
            if self._fold_owed:  # a fold a pull left to others, or a show put off: never more than this late
                self._refold()
            now = trio.current_time()
            # a muted member (its store behind its own feed) waits for its own events, and one
            # with peers still to pull from for holding more: neither is quiet
            if wait.cancelled_caught and now - self.repaired_at > QUIET_AFTER and not self.mute \
                    and not self._pull_wanted and now - last_round < QUIET_SYNC_INTERVAL:
                continue  # quiet: nothing to look for yet
            if now - self.store_refused_at < REFUSED_QUIET and now - last_round < QUIET_SYNC_INTERVAL:
                self.sync_now = trio.Event()  # a wake asked for (a gap) is let go: its store
                continue  # refuses writes, nothing pulled could be kept (a new connection still pulls)
            last_round = now
            self.sync_now = trio.Event()
            self.stats.sync_rounds += 1
            connected = self.network.connected_peers()
            # peers known to hold more first, but never every slot: a status may lie, and
            # the rotation must still reach every peer
            ahead = sorted(peer for peer in self._pull_wanted.intersection(connected) if peer not in self._pulling)
            ahead = ahead[:SYNC_FANOUT - 1]
            self._pull_wanted.difference_update(ahead)  # the rest wait for the next round
            self._pull_wanted.intersection_update(connected)
            for peer in ahead:
                self._start_pull(nursery, peer)
            for peer in self._next_pulls(connected, SYNC_FANOUT - len(ahead)):
                self._start_pull(nursery, peer)

    def _next_pulls(self, connected: list[str], count: int = SYNC_FANOUT) -> list[str]:
        """The next ``count`` peers with no pull running, in a rotation over the connected
        peers that every member orders its own way (by a hash of its id and theirs), so that
        no peer is everyone's first choice. The rotation goes on from the last peer chosen,
        by its key, not by a position: peers joining or leaving make it skip nobody. Every
        connected peer is reached within ceil(peers / SYNC_FANOUT) rounds (within ``peers``
        rounds while statuses take places: see ``peer_holds``); no random source, no
        arrival order."""
        ring = sorted((self._ring_key(peer), peer) for peer in connected)
        start = bisect.bisect_right([key for key, _ in ring], self._pull_after)
        chosen: list[str] = []
        for key, peer in ring[start:] + ring[:start]:
            if peer not in self._pulling:
                chosen.append(peer)
                self._pull_after = key
                if len(chosen) == count:
                    break
        return chosen

    def _ring_key(self, peer: str) -> bytes:
        key = self._ring_keys.get(peer)
        if key is None:
            if len(self._ring_keys) > 4096:  # peers come and go: keep the memo bounded
                self._ring_keys.clear()
            key = self._ring_keys[peer] = hashlib.sha256(self.network.peer_id.encode() + peer.encode()).digest()
        return key

    def _start_pull(self, nursery: trio.Nursery, peer: str) -> None:
        """Start a pull from ``peer`` unless one is running."""
        if peer not in self._pull_done:
            nursery.start_soon(self._pull_registered, peer, self._register_pull(peer))

    def _drop_wedged_pulls(self) -> None:
        """A pull that has not moved for ``WEDGED_AFTER`` ignored its deadline: drop its
        peer's connection (once) to break it, unless this process itself stalled meanwhile (at
        a wake every pull in flight looks old; the adapter's open rule says the same)."""
        now = trio.current_time()
        for peer, moved in list(self._pulling.items()):
            if now - moved > WEDGED_AFTER and peer not in self._wedged \
                    and not self.network.stalled_since(now - WEDGED_AFTER):
                self._wedged.add(peer)
                self.stats.sync_timeouts += 1
                self._log.warning("sync pull wedged: it outlived its deadline; dropping the connection",
                                  peer=peer[-8:], still_s=round(now - moved, 1))
                self.network.drop(peer)


__all__ = ["SyncSchedule"]

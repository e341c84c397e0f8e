"""Which connected peers still answer: the libp2p adapter's liveness checks.

A blackholed link (a partition, a dead machine behind a live switch) closes nothing:
TCP waits, streams hang, and the peer stays "connected" for minutes. So every
``PING_INTERVAL`` up to ``PING_FANOUT`` connected peers are checked, those checked
longest ago first, skipping any heard from within ``QUIET_BEFORE_PING`` (its link
evidently delivers: gossip and sync say so most of the time), each on its own task (one
stuck check delays no other peer's): a probe the peer's muxer must answer (the network's
``probe``: a yamux ping frame, whose ACK is read like any frame and so heard), answered
within a deadline that follows what answers take on this machine now (``RoundTrips``).
Any frame heard from the peer after the probe went out answers it: it proves the link
delivers, which is all a check asks. A yamux ping costs each end one 12-byte frame; a
ping stream (``/ipfs/ping/1.0.0``, what this used before) cost both ends a stream
negotiation, about a third of fifty idle members' CPU. The fan-out keeps a member's
checks per second the same at 5 peers and at 50 (checking every peer every interval,
thirty processes on two cores spent their time on ping streams and dropped each other);
a silent peer among ``n`` is checked at least every ceil(n / ``PING_FANOUT``) intervals.

A peer is dropped only on evidence that its link delivers nothing:

* two probes in a row unanswered, because one can be lost to a moment's congestion, the
  second given twice the first's time, up to the cap (TCP's back-off: a miss is no
  sample of how long an answer takes, so the deadline grows without one); the first is
  TCP's retransmission timeout (RFC 6298: the smoothed round trip of that peer's
  answered probes plus four times its variation), never under ``PING_TIMEOUT`` nor
  over ``MAX_PING_TIMEOUT``. Thirty members starved on two cores answer in
  seconds; a fixed 4 s dropped live peers by the hundred, and every redial (a Noise
  handshake, identify, the pubsub hello) starved them further. Two that both fail at
  once found the connection gone or broken: it is closed and redialled, but that is no
  verdict on the peer, and is logged as such;
* neither spanning a stall of this process (``StallWatch``): every member of a starved
  machine stalls together and wakes with every deadline past, answers unread;
* and nothing else heard from the peer since the first probe began (``heard``: any frame
  read on its connection, which the adapter reports; a stream it opened to us, one we
  opened to it, a gossip message it forwarded): heard between the two probes, it is kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

from agents.net.base import StreamClosed
from agents.net.stalls import StallWatch

log = structlog.get_logger("swarm.net")

PING_INTERVAL = 2.0
PING_TIMEOUT = 4.0  # the least a ping is given, and all it is given before any is answered
MAX_PING_TIMEOUT = 30.0  # the most: a blackholed peer is dropped within 2x this of its check
PING_FANOUT = 4  # peers checked per PING_INTERVAL, whatever the cluster's size
QUIET_BEFORE_PING = 5 * PING_INTERVAL  # a peer heard from this recently is not checked


class RoundTrips:
    """How long one peer's answered pings take: RFC 6298's estimator, and the deadline it
    gives the next ping. Per peer, as TCP keeps one per connection: one shared by all
    would let a single slow (or hostile) peer stretch every peer's deadline to the cap."""

    def __init__(self) -> None:
        self.smoothed: float | None = None
        self.variation = 0.0

    def answered(self, seconds: float) -> None:
        if self.smoothed is None:
            self.smoothed, self.variation = seconds, seconds / 2
        else:
            self.variation = 0.75 * self.variation + 0.25 * abs(self.smoothed - seconds)
            self.smoothed = 0.875 * self.smoothed + 0.125 * seconds

    def timeout(self, misses: int = 0) -> float:
        """The deadline of a ping that follows ``misses`` missed ones of the same check."""
        base = PING_TIMEOUT if self.smoothed is None else self.smoothed + 4 * self.variation
        return min(MAX_PING_TIMEOUT, max(PING_TIMEOUT, base) * 2 ** misses)


class Liveness:
    """Run with ``nursery.start_soon(liveness.run, nursery)``; tell it ``heard(peer)``."""

    def __init__(self, probe: Callable[[str], Awaitable[None]], connected: Callable[[], list[str]],
                 drop: Callable[[str], None]) -> None:
        self._probe = probe  # sends what the peer must answer with a frame; StreamClosed when it cannot
        self._connected = connected
        self._drop = drop
        self._checking: set[str] = set()  # peers with a check running
        self._heard: dict[str, float] = {}  # peer -> trio time we last heard from it
        self._answers: dict[str, trio.Event] = {}  # peer -> set when it is heard from: its probe's answer
        self._checked: dict[str, float] = {}  # peer -> trio time its latest check began
        self.stalls = StallWatch()
        self.round_trips: dict[str, RoundTrips] = {}  # per peer, as TCP's per connection
        self.kept = 0  # checks that missed twice but had heard from the peer meanwhile

    def heard(self, peer: str) -> None:
        """Something arrived from ``peer`` just now."""
        self._heard[peer] = trio.current_time()
        answer = self._answers.get(peer)
        if answer is not None:
            answer.set()

    async def run(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.stalls.run)
        while True:
            await trio.sleep(PING_INTERVAL)
            now = trio.current_time()
            never = float("-inf")
            connected = set(self._connected())
            for seen in (self._heard, self._checked, self.round_trips):  # bounded by the peers connected now
                for gone in seen.keys() - connected:
                    del seen[gone]
            due = sorted((peer for peer in connected if peer not in self._checking
                          and now - self._heard.get(peer, never) > QUIET_BEFORE_PING),
                         key=lambda peer: (self._checked.get(peer, never), peer))
            for peer in due[:PING_FANOUT]:
                self._checking.add(peer)
                self._checked[peer] = now
                nursery.start_soon(self._check, peer)

    async def _check(self, peer: str) -> None:
        try:
            began = trio.current_time()
            failed_at_once = 0
            deadlines = []
            for misses in range(2):
                started = trio.current_time()
                trips = self.round_trips.setdefault(peer, RoundTrips())
                deadlines.append(timeout := trips.timeout(misses))
                if await self._ping(peer, timeout):
                    trips.answered(trio.current_time() - started)
                    self.heard(peer)
                    return
                if self.stalls.stalled_since(started):  # our silence, not the peer's: ask again later
                    log.info("ping missed while this process stalled; not counted", peer=peer)
                    return
                if trio.current_time() - started < timeout:
                    failed_at_once += 1  # no connection, or a broken one (reset, closed)
            if self._heard.get(peer, float("-inf")) > began:
                self.kept += 1
                log.info("pings missed, but the peer is heard from; kept", peer=peer)
                return
            if failed_at_once == 2:
                # not the silence of a blackholed link: close what is left, it is redialled
                log.info("pings failed at once: the connection is broken; closing it", peer=peer)
            else:
                log.warning("peer unresponsive; disconnecting", peer=peer, misses=2,
                            waited_s=[round(deadline, 1) for deadline in deadlines])
            self._drop(peer)
        finally:
            self._checking.discard(peer)

    async def _ping(self, peer: str, timeout: float) -> bool:
        """One probe: whether anything was heard from ``peer`` within ``timeout`` of sending it."""
        answer = self._answers[peer] = trio.Event()  # one check per peer runs at a time (``_checking``)
        try:
            with trio.move_on_after(timeout):
                try:
                    await self._probe(peer)
                except StreamClosed as exc:
                    log.debug("probe failed", peer=peer, error=str(exc)[:160])
                    return False
                await answer.wait()
                return True
            return False
        finally:
            del self._answers[peer]

"""An in-memory ``Network`` for the simulated world: seeded delay, loss, duplication, partitions.

Every member of a simulated run gets a ``SimNetwork`` endpoint on one shared
``SimFabric``. The fabric decides the fate of every message from one seeded
random stream, in the order the (deterministic) members send them:

* **gossip** goes straight to every other member that is up and reachable,
  each copy with its own delay (so copies overtake each other), each copy
  maybe lost, maybe delivered twice. Unlike libp2p's mesh, nothing relays, so
  a lost copy stays lost until a sync pull fetches the event; that is the
  harsher world, on purpose.
* **sync streams** carry whole frames reliably and in order, each frame
  delayed; a stream whose two ends stop being able to reach each other (a
  partition, a crash) is reset, which is what libp2p's liveness ping does to a
  silent link. Opening a stream to a member that cannot be reached fails after
  a delay, like a dial timeout.
* **one-way partitions**: gossip from one group to another is lost while the
  other direction still arrives; a sync stream needs both directions (as TCP
  does), so none opens across a one-way cut and open ones are reset;
* **pause** (a member stopped with SIGSTOP): traffic to and from it waits, and
  flows again, late, when it resumes; its own tasks keep running, which is what
  makes a thawed member a zombie that acts on a stale view;
* **connections**: when a member comes up, or a partition heals, both ends of
  every link that just became usable are told, which is when members pull.

Nothing here reads the wall clock: time is trio's (a ``MockClock`` in a run).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import trio

from agents.net.base import MAX_FRAME_BYTES, FrameTooLarge, PeerStream, StreamClosed, StreamHandler

DIAL_FAIL_S = 2.0  # how long opening a stream to an unreachable member takes to fail


@dataclass
class LinkWeather:
    """How messages travel right now. Changed by the nemesis during a run."""

    delay_ms: tuple[int, int] = (1, 30)  # uniform per copy / per frame
    loss: float = 0.0  # probability a gossip copy is lost
    duplicate: float = 0.0  # probability a gossip copy is delivered twice


class SimFabric:
    """The wires between the simulated members. One per run; all randomness from ``rng``."""

    def __init__(self, rng: random.Random, nursery: trio.Nursery) -> None:
        self.rng = rng
        self.weather = LinkWeather()
        self._nursery = nursery
        self._endpoints: dict[str, SimNetwork] = {}
        self._up: set[str] = set()
        self._group: dict[str, int] = {}  # partition group per peer; absent = group 0
        self._streams: list[SimStream] = []
        self._one_way: set[tuple[int, int]] = set()  # (from group, to group) whose gossip is lost
        self._paused: dict[str, trio.Event] = {}  # member -> set when it resumes
        self.delivered = 0
        self.lost = 0
        self.duplicated = 0

    # --- membership -----------------------------------------------------------

    def endpoint(self, peer_id: str) -> SimNetwork:
        network = SimNetwork(self, peer_id)
        self._endpoints[peer_id] = network
        return network

    def reachable(self, a: str, b: str) -> bool:
        """Both directions work (what a connection and a sync stream need)."""
        return (a != b and a in self._up and b in self._up
                and self._group.get(a, 0) == self._group.get(b, 0))

    def can_send(self, a: str, b: str) -> bool:
        """Datagrams from ``a`` reach ``b`` (gossip under a one-way partition)."""
        if a == b or a not in self._up or b not in self._up:
            return False
        ga, gb = self._group.get(a, 0), self._group.get(b, 0)
        return ga == gb or ((ga, gb) not in self._one_way and bool(self._one_way))

    def peers_of(self, peer_id: str) -> list[str]:
        return sorted(p for p in self._up if self.reachable(peer_id, p))

    def bring_up(self, network: SimNetwork) -> None:
        """``network`` (a fresh endpoint of a starting member) joins: its links open."""
        self._endpoints[network.peer_id] = network
        before = self._usable_links()
        self._up.add(network.peer_id)
        self._announce(self._usable_links() - before)

    def take_down(self, peer_id: str) -> None:
        self._up.discard(peer_id)
        self._reset_broken_streams()

    def partition(self, groups: list[list[str]]) -> None:
        """Split the members into ``groups``; anyone not named is alone in a group of its own."""
        self._group = {}
        self._one_way = set()  # a partition replaces a one-way cut (else traffic would cross groups)
        for number, group in enumerate(groups, start=1):
            for peer in group:
                self._group[peer] = number
        lonely = len(groups) + 1
        for peer in sorted(self._endpoints):
            if peer not in self._group:
                self._group[peer] = lonely
                lonely += 1
        self._reset_broken_streams()

    def one_way(self, senders: list[str], receivers: list[str]) -> None:
        """Lose everything ``senders`` send to ``receivers``; the other direction still flows."""
        self._group = {p: 1 for p in senders} | {p: 2 for p in receivers}
        for peer in self._endpoints:
            self._group.setdefault(peer, 1)
        self._one_way = {(1, 2)}
        self._reset_broken_streams()

    @property
    def cut(self) -> str | None:
        """The cut in force: "oneway", "partition" or None (one replaces the other)."""
        return "oneway" if self._one_way else "partition" if self._group else None

    def heal(self) -> None:
        before = self._usable_links()
        self._group = {}
        self._one_way = set()
        self._announce(self._usable_links() - before)

    def pause(self, peer: str) -> None:
        self._paused.setdefault(peer, trio.Event())

    def resume(self, peer: str) -> None:
        event = self._paused.pop(peer, None)
        if event is not None:
            event.set()

    async def thawed(self, *peers: str) -> None:
        for peer in peers:
            event = self._paused.get(peer)
            if event is not None:
                await event.wait()

    def _usable_links(self) -> set[tuple[str, str]]:
        up = sorted(self._up)
        return {(a, b) for i, a in enumerate(up) for b in up[i + 1:] if self.reachable(a, b)}

    def _announce(self, links: set[tuple[str, str]]) -> None:
        for a, b in sorted(links):
            self._endpoints[a].connected(b)
            self._endpoints[b].connected(a)

    def _reset_broken_streams(self) -> None:
        alive = []
        for stream in self._streams:
            if stream.closed:
                continue
            if self.reachable(stream.local, stream.peer):
                alive.append(stream)
            else:
                stream.reset()
        self._streams = alive

    # --- traffic --------------------------------------------------------------

    def delay_s(self) -> float:
        """The next message's (or frame's) delay under the current weather."""
        low, high = self.weather.delay_ms
        return self.rng.randint(low, high) / 1000

    def gossip(self, sender: str, data: bytes) -> None:
        for peer in sorted(p for p in self._up if self.can_send(sender, p)):
            if self.rng.random() < self.weather.loss:
                self.lost += 1
                continue
            copies = 2 if self.rng.random() < self.weather.duplicate else 1
            self.duplicated += copies - 1
            for _ in range(copies):
                self._nursery.start_soon(self._deliver, sender, self._endpoints[peer], data, self.delay_s())

    async def _deliver(self, sender: str, target: SimNetwork, data: bytes, delay: float) -> None:
        await self.thawed(sender)
        await trio.sleep(delay)
        await self.thawed(target.peer_id)
        # a copy in flight when the link broke is lost; one to a restarted member
        # went to the old endpoint, which nobody reads any more
        if self.can_send(sender, target.peer_id) and self._endpoints.get(target.peer_id) is target:
            self.delivered += 1
            target.deliver(data)

    async def open_stream(self, opener: str, peer: str) -> SimStream:
        await self.thawed(opener, peer)
        await trio.sleep(self.delay_s())
        server = self._endpoints.get(peer)
        if not self.reachable(opener, peer) or server is None or server.handler is None:
            await trio.sleep(DIAL_FAIL_S)
            raise StreamClosed(f"cannot open a sync stream to {peer[-8:]}: unreachable")
        client_end, server_end = SimStream.pair(self, opener, peer)
        self._streams.extend([client_end, server_end])
        handler = server.handler
        server.spawn(lambda: _serve(handler, server_end))
        return client_end


async def _serve(handler: StreamHandler, stream: SimStream) -> None:
    try:
        await handler(stream)
    finally:
        await stream.aclose()


class SimStream:
    """One end of a reliable, ordered, delayed frame pipe."""

    def __init__(self, fabric: SimFabric, local: str, peer: str,
                 inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        self.fabric = fabric
        self.local = local
        self.peer = peer
        self._inbox = inbox
        self._outbox: trio.MemorySendChannel[bytes] | None = None
        self._other: SimStream | None = None
        self.closed = False
        self.was_reset = False

    @classmethod
    def pair(cls, fabric: SimFabric, a: str, b: str) -> tuple[SimStream, SimStream]:
        to_a_send, to_a_receive = trio.open_memory_channel[bytes](1000)
        to_b_send, to_b_receive = trio.open_memory_channel[bytes](1000)
        end_a, end_b = cls(fabric, a, b, to_a_receive), cls(fabric, b, a, to_b_receive)
        end_a._outbox, end_b._outbox = to_b_send, to_a_send
        end_a._other, end_b._other = end_b, end_a
        return end_a, end_b

    async def send(self, frame: bytes) -> None:
        if self.closed or self._outbox is None:
            raise StreamClosed(f"sync stream to {self.peer[-8:]} is {'reset' if self.was_reset else 'closed'}")
        await self.fabric.thawed(self.local, self.peer)  # a paused end neither sends nor reads
        await trio.sleep(self.fabric.delay_s())
        if self.closed:
            raise StreamClosed(f"sync stream to {self.peer[-8:]} was reset")
        try:
            self._outbox.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError, trio.WouldBlock):
            raise StreamClosed(f"sync stream to {self.peer[-8:]} closed by the peer") from None

    async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        try:
            frame = await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StreamClosed(
                f"sync stream to {self.peer[-8:]} {'was reset' if self.was_reset else 'closed by the peer'}"
            ) from None
        if len(frame) > min(limit, MAX_FRAME_BYTES):
            raise FrameTooLarge(f"{self.peer[-8:]} sent a {len(frame)}-byte frame (limit {min(limit, MAX_FRAME_BYTES)})")
        return frame

    def reset(self) -> None:
        for end in (self, self._other):
            if end is not None and not end.closed:
                end.was_reset = True
                end._close_now()

    def _close_now(self) -> None:
        self.closed = True
        if self._outbox is not None:
            self._outbox.close()
        self._inbox.close()

    async def aclose(self) -> None:
        if not self.closed:
            self._close_now()

    async def abort(self) -> None:
        self.reset()


class SimNetwork:
    """One member's endpoint on the fabric: the ``agents.net.base.Network`` interface."""

    def __init__(self, fabric: SimFabric, peer_id: str) -> None:
        self.fabric = fabric
        self.peer_id = peer_id
        self.handler: StreamHandler | None = None
        self._gossip_send, self._gossip = trio.open_memory_channel[bytes](100_000)
        self._conn_send, self._connections = trio.open_memory_channel[str](10_000)
        self._spawn: Callable[[Callable], None] | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        """Served streams run in the member's own nursery, so a crash ends them."""
        self._spawn = lambda fn: nursery.start_soon(fn)

    def spawn(self, fn: Callable) -> None:
        assert self._spawn is not None, "attach() the endpoint to its member's nursery first"
        self._spawn(fn)

    # Network interface

    async def publish(self, data: bytes) -> None:
        self.fabric.gossip(self.peer_id, data)

    @property
    def gossip(self) -> trio.MemoryReceiveChannel[bytes]:
        return self._gossip

    @property
    def connections(self) -> trio.MemoryReceiveChannel[str]:
        return self._connections

    def connected_peers(self) -> list[str]:
        return self.fabric.peers_of(self.peer_id)

    async def open_stream(self, peer: str) -> PeerStream:
        return await self.fabric.open_stream(self.peer_id, peer)

    def serve(self, handler: StreamHandler) -> None:
        self.handler = handler

    def drop(self, peer: str) -> None:
        """Nothing to close: the fabric has no connections, only reachability, and every
        pull over it ends at its deadline, so a member never finds one wedged here."""

    def counters(self) -> dict[str, int]:
        return {}  # no pings and no stalls of its own: the fabric has no liveness checks

    def stalled_since(self, start: float) -> bool:
        return False  # a paused simulated member stops its tasks; virtual time never stalls

    # fabric side

    def deliver(self, data: bytes) -> None:
        self._gossip_send.send_nowait(data)

    def connected(self, peer: str) -> None:
        self._conn_send.send_nowait(peer)

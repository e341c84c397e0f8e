"""The one small interface between a member and its network.

Gossip (``publish`` / ``gossip``) is best-effort and fast; sync streams
(``open_stream`` / ``serve``) are reliable request-response conversations with
one peer, which is what guarantees convergence. The roles, the fold and the sync
protocol never see anything else, so the same member code runs over libp2p
and over a simulated, seeded network.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

# The largest frame any sync step may send (PROTOCOL.md, section 11); each step has its own,
# smaller limit where it can (``receive(limit)``), so a peer cannot make us buffer more.
MAX_FRAME_BYTES = 16 * 1024 * 1024


class StreamClosed(Exception):
    """The peer closed or reset the stream, or sent a frame that breaks the framing."""


class FrameTooLarge(StreamClosed):
    """The peer announced a frame over the step's limit: the stream ends before it is read."""


class PeerStream(Protocol):
    """A reliable, ordered conversation with one peer, in whole frames."""

    peer: str

    async def send(self, frame: bytes) -> None: ...

    async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        """The next frame; StreamClosed when the peer announces more than ``limit`` bytes."""
        ...

    async def aclose(self) -> None: ...

    async def abort(self) -> None:
        """Reset the stream: whatever the peer still sends is dropped, not buffered for us."""
        ...


class MeteredStream:
    """A PeerStream that counts the frame bytes it carries each way (what sync costs)."""

    def __init__(self, stream: PeerStream) -> None:
        self._stream = stream
        self.peer = stream.peer
        self.sent = 0
        self.received = 0

    async def send(self, frame: bytes) -> None:
        await self._stream.send(frame)
        self.sent += len(frame)

    async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        frame = await self._stream.receive(limit)
        self.received += len(frame)
        return frame

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def abort(self) -> None:
        await self._stream.abort()


StreamHandler = Callable[[PeerStream], Awaitable[None]]


class Network(Protocol):
    peer_id: str

    async def publish(self, data: bytes) -> None:
        """Gossip ``data`` to the cluster topic. Best-effort: it may never arrive."""
        ...

    @property
    def gossip(self) -> trio.MemoryReceiveChannel[bytes]:
        """Payloads gossiped by others (already past the topic validator)."""
        ...

    @property
    def connections(self) -> trio.MemoryReceiveChannel[str]:
        """Peer ids, each time a connection to a peer opens."""
        ...

    def connected_peers(self) -> list[str]: ...

    async def open_stream(self, peer: str) -> PeerStream:
        """Open a sync stream to ``peer``; raises StreamClosed when it cannot."""
        ...

    def drop(self, peer: str) -> None:
        """Close our connections to ``peer`` in the background (it is redialled as usual):
        what a member does when a pull to it outlived every deadline."""
        ...

    def serve(self, handler: StreamHandler) -> None:
        """Call ``handler`` for every sync stream a peer opens to us."""
        ...

    def counters(self) -> dict[str, int]:
        """The transport's own counts, for metrics (names from ``agents.metrics``)."""
        ...

    def stalled_since(self, start: float) -> bool:
        """Whether this process itself stopped running after trio time ``start``: a deadline
        that passed meanwhile says nothing about the peer."""
        ...

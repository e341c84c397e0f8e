"""py-libp2p streams for the adapter (``agents.net.p2p``): framed sync streams, and the
small tools that keep a caller's deadline whatever py-libp2p does underneath."""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
from collections.abc import Callable

import trio

from agents.net.base import MAX_FRAME_BYTES, FrameTooLarge, StreamClosed

CLOSE_TIMEOUT = 1.0  # closing or resetting a stream: past it the stream is left to the muxer


class Libp2pStream:
    """Length-prefixed frames over a libp2p stream."""

    def __init__(self, stream, peer: str) -> None:
        self._stream = stream
        self.peer = peer
        self._buffer = bytearray()  # appended in place: reassembling a frame is linear in its size

    async def send(self, frame: bytes) -> None:
        try:
            await self._stream.write(len(frame).to_bytes(4, "big") + frame)
        except Exception as exc:  # libp2p raises many unrelated types for a dead stream
            raise StreamClosed(f"cannot write to {self.peer[-8:]}: {exc!r}") from None

    async def _read_exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            try:
                chunk = await self._stream.read(max(65536, count - len(self._buffer)))
            except Exception as exc:
                raise StreamClosed(f"cannot read from {self.peer[-8:]}: {exc!r}") from None
            if not chunk:
                raise StreamClosed(f"{self.peer[-8:]} closed the stream")
            self._buffer += chunk
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        size = int.from_bytes(await self._read_exactly(4), "big")
        if size > min(limit, MAX_FRAME_BYTES):
            raise FrameTooLarge(f"{self.peer[-8:]} announced a {size}-byte frame (limit {min(limit, MAX_FRAME_BYTES)})")
        return await self._read_exactly(size)

    async def aclose(self) -> None:
        # Bounded: closing writes a frame, and on a connection to a blackholed peer that write
        # (or the muxer lock behind it) can wait forever; a close is best-effort anyway.
        with trio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Exception):
            await self._stream.close()

    async def abort(self) -> None:
        self._buffer.clear()
        with trio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Exception):
            await self._stream.reset()


async def reset(stream) -> None:
    """Reset a py-libp2p stream, giving up after ``CLOSE_TIMEOUT`` (the muxer has it then)."""
    with trio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Exception):
        await stream.reset()


def _secured(connection):
    return getattr(getattr(connection, "muxed_conn", None), "secured_conn", None)


def heard_through(connection) -> bool:
    """Whether ``hear_frames`` has hooked ``connection`` already."""
    return getattr(_secured(connection), "_hears", False)


def hear_frames(connection, heard: Callable[[], None]) -> bool:
    """Have each read of ``connection``'s secure session call ``heard``: every muxer frame
    the peer sends (gossip, its control messages, the answers to the muxer's own pings every
    30 s) is evidence that the link delivers, and costs nothing to notice; a ping stream
    costs both ends a negotiation. Once per connection (False when already done, or for a
    shape other than py-libp2p 0.8.1's SwarmConn > Yamux > SecureSession)."""
    secured = _secured(connection)
    read = getattr(secured, "read", None)
    if read is None or getattr(secured, "_hears", False):
        return False

    async def read_and_hear(n: int | None = None) -> bytes:
        data = await read(n)
        if data:
            heard()
        return data

    secured.read = read_and_hear  # type: ignore[union-attr]
    secured._hears = True  # type: ignore[union-attr]
    return True


# yamux's frame header (version, type, flags, stream id, length): a ping is type 2, its
# request flagged SYN, stream 0, the "length" an opaque value the answer (flagged ACK) echoes
_YAMUX_HEADER = struct.Struct("!BBHII")
_PING, _SYN = 2, 1
_ping_values = itertools.count(1)


async def muxer_ping(connection) -> bool:
    """Send a yamux ping on ``connection``: the peer's muxer answers it in its read loop with
    an ACK frame, which ``hear_frames`` notices like any frame (no stream, no negotiation).
    False for a shape other than py-libp2p 0.8.1's SwarmConn > Yamux; StreamClosed when the
    frame cannot be written."""
    muxer = getattr(connection, "muxed_conn", None)
    write = getattr(muxer, "_write_frame", None)
    if write is None:
        return False
    try:
        await write(_YAMUX_HEADER.pack(0, _PING, _SYN, 0, next(_ping_values) & 0xFFFFFFFF))
    except Exception as exc:  # libp2p raises many unrelated types for a dead connection
        raise StreamClosed(f"cannot ping through the muxer: {exc!r}") from None
    # py-libp2p times its own pings (its RTT loop, every 30 s) from this, whichever ACK comes:
    # set as its loop does, the ACK to ours gives it a true sample, not one 30 s long
    muxer._ping_sent_time = trio.current_time()
    return True


def sever(connection) -> None:
    """Shut down the TCP socket under a py-libp2p 0.8.1 connection (SwarmConn > Yamux >
    SecureSession > noise > RawConnection > TrioTCPStream > trio.SocketStream), so a write
    blocked on it fails and the connection's own teardown runs. Other shapes are left alone."""
    layer = connection
    for attribute in ("muxed_conn", "secured_conn", "conn", "conn", "stream", "stream"):
        layer = getattr(layer, attribute, None)
    if isinstance(layer, trio.SocketStream):
        with contextlib.suppress(OSError):
            layer.socket.shutdown(socket.SHUT_RDWR)

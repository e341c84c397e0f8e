"""Stream opens that keep their caller's deadline, whatever py-libp2p does underneath.

py-libp2p cleans up a failed ``new_stream`` in a shielded scope with no deadline (a reset
that waits for the connection's writer), which would hold its caller past any deadline of
the caller's. So every open (sync, peer exchange) runs in a task of the network's own
nursery, and its caller waits at most ``DIAL_TIMEOUT``; an open left behind is remembered,
and a peer whose opens stay wedged has its connections dropped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import structlog
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from agents.net.base import StreamClosed
from agents.net.streams import reset

log = structlog.get_logger("swarm.net")

DIAL_TIMEOUT = 5.0


class Opening:
    """One stream open under way in the network's task: ``done`` once it returned."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.since = 0.0  # when its caller gave up on it


class StreamOpener:
    """Opens py-libp2p streams for ``Libp2pNetwork``; ``nursery`` is set while the network runs.

    ``drop(peer)`` closes a peer's connections, ``stalled_since(t)`` says whether this process
    itself stalled since ``t`` (``stalls.py``), ``heard(peer)`` tells liveness the peer answered."""

    def __init__(self, host, drop: Callable[[str], None], stalled_since: Callable[[float], bool],
                 heard: Callable[[str], None]) -> None:
        self._host = host
        self._drop = drop
        self._stalled_since = stalled_since
        self._heard = heard
        self.nursery: trio.Nursery | None = None  # for tasks the callers may leave behind
        self._abandoned: dict[tuple[str, TProtocol], set[Opening]] = {}  # opens their callers left

    async def open(self, peer: str, protocol: TProtocol):
        """A py-libp2p stream to ``peer`` for ``protocol``, or StreamClosed within ``DIAL_TIMEOUT``.
        An open whose caller gave up is remembered: the next open of that protocol to that peer
        first waits for it (as long again), fails if it still has not returned, and drops the
        peer's connections once it is twice that old."""
        key = (peer, protocol)
        stuck = self._abandoned.get(key)
        if stuck:
            oldest = min(stuck, key=lambda left: left.since)
            with trio.move_on_after(DIAL_TIMEOUT):
                await oldest.done.wait()
            if not oldest.done.is_set():
                # an open this old is wedged, unless we ourselves stalled within that time:
                # at a wake every open in flight looks old, and the peer is not to blame
                now = trio.current_time()
                if now - oldest.since > 2 * DIAL_TIMEOUT \
                        and not self._stalled_since(now - 2 * DIAL_TIMEOUT):
                    log.warning("stream open wedged; dropping the connection", peer=peer,
                                protocol=protocol, age_s=round(trio.current_time() - oldest.since, 1))
                    self._drop(peer)
                raise StreamClosed(f"cannot open a stream to {peer[-8:]}: an earlier open has not returned")
        if self.nursery is None:
            raise StreamClosed(f"cannot open a stream to {peer[-8:]}: the network is not running")
        opening = Opening()
        send, receive = trio.open_memory_channel[Any](1)
        self.nursery.start_soon(self._open_in_task, key, opening, send)
        outcome: Any = None
        try:
            with trio.move_on_after(DIAL_TIMEOUT):
                outcome = await receive.receive()
        finally:
            if outcome is None:
                with contextlib.suppress(trio.WouldBlock):
                    outcome = receive.receive_nowait()  # sent as the deadline passed
                if outcome is None and not opening.done.is_set():
                    opening.since = trio.current_time()
                    self._abandoned.setdefault(key, set()).add(opening)
                elif outcome is not None and not isinstance(outcome, BaseException):
                    if self.nursery is not None:  # our caller was cancelled meanwhile
                        self.nursery.start_soon(reset, outcome)
                    outcome = None
            receive.close()  # from here a stream that opens after all is reset by the task
        if outcome is None:
            raise StreamClosed(f"cannot open a stream to {peer[-8:]}: none opened in {DIAL_TIMEOUT:g} s")
        if isinstance(outcome, BaseException):
            raise StreamClosed(f"cannot open a stream to {peer[-8:]}: {outcome!r}")
        self._heard(peer)  # the peer answered the protocol negotiation
        return outcome

    async def _open_in_task(self, key: tuple[str, TProtocol], opening: Opening,
                            send: trio.MemorySendChannel) -> None:
        peer, protocol = key
        stream = None
        try:
            with trio.move_on_after(DIAL_TIMEOUT):
                stream = await self._host.new_stream(ID.from_base58(peer), [protocol])
        except Exception as exc:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
                send.send_nowait(exc)
        else:
            if stream is not None:
                try:
                    send.send_nowait(stream)
                except (trio.BrokenResourceError, trio.ClosedResourceError):  # the caller gave up
                    await reset(stream)
        finally:
            opening.done.set()
            left = self._abandoned.get(key)
            if left is not None:
                left.discard(opening)
                if not left:
                    del self._abandoned[key]

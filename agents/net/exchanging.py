"""Both sides of peer exchange for one host: whom to ask and when, how to answer, whom to trust.

``peer_exchange.py`` is the conversation itself (frames, tickets, the rules of a
listing); this is its use by a running host (``p2p.Libp2pNetwork``): it asks a
peer on connecting, and then, every ``REASK_EVERY``, the connected peer asked longest
ago if that was at least ``EXCHANGE_INTERVAL`` ago (one ask per interval whatever the
cluster's size: asking each peer every interval made a member's asks grow with its
peers, and every ask is a stream, two ticket checks and a listing); it answers a peer
at most once in ``ASKS_APART`` (a sooner ask is closed unread and counted, not treated
as a refusal); and it remembers which connected peers showed a ticket of the cluster
(*admitted*: the only ones it lists) and which broke the protocol or had none
(*strangers*: they learn nothing, and their connections do not count toward the dial
bound).
No exception from a conversation reaches py-libp2p: a handler that raised would
end the connection, or the host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

from agents.core.admission import Credentials
from agents.net import peer_exchange
from agents.net.base import PeerStream, StreamClosed
from agents.net.peer_book import PeerBook
from agents.net.streams import Libp2pStream

log = structlog.get_logger("swarm.net")

EXCHANGE_INTERVAL = 30.0  # a connected peer is asked whom it knows on connecting, then at most this often
REASK_EVERY = 10.0  # and one of them is asked again at most this often
EXCHANGE_TIMEOUT = 10.0
ASKS_APART = 10.0  # a peer's asks are answered at most this often; one sooner is closed unanswered


class PeerExchanges:
    """One host's peer exchanges. ``open_stream(peer)`` opens a peer-exchange stream,
    ``connected()`` lists connected peers, ``addresses_of(peer)`` says where one listens."""

    def __init__(self, credentials: Credentials, book: PeerBook,
                 open_stream: Callable[[str], Awaitable[object]],
                 connected: Callable[[], list[str]],
                 addresses_of: Callable[[str], list[str]]) -> None:
        self._credentials = credentials
        self._book = book
        self._open = open_stream
        self._connected = connected
        self._addresses_of = addresses_of
        self.asked_at: dict[str, float] = {}
        self.reasked_at = float("-inf")  # when ``due`` last named a peer
        self.admitted: set[str] = set()  # peers whose ticket a peer exchange checked
        self.strangers: set[str] = set()  # peers whose ticket a peer exchange refused
        self.answered_at: dict[str, float] = {}  # peers answered in the last ASKS_APART seconds
        self.counts = {"answered": 0, "learned": 0, "refused": 0, "too_soon": 0}

    def keep_to(self, connected: set[str], now: float) -> None:
        """Forget what only mattered while a peer was connected (a peer back is asked again);
        answer times are kept across reconnections (a reconnecting peer must not reset its
        window) and bounded by age instead."""
        self.asked_at = {p: t for p, t in self.asked_at.items() if p in connected}
        self.admitted &= connected
        self.strangers &= connected
        self.answered_at = {p: t for p, t in self.answered_at.items() if now - t < ASKS_APART}

    def due(self, connected: set[str], now: float) -> str | None:
        """The connected peer to ask again now (the one asked longest ago), if one is due and
        no other was named in the last ``REASK_EVERY``; naming one starts that wait (a second
        call at once names nobody)."""
        if not connected or now - self.reasked_at < REASK_EVERY:
            return None
        oldest = min(sorted(connected), key=lambda p: self.asked_at.get(p, 0.0))
        if now - self.asked_at.get(oldest, 0.0) <= EXCHANGE_INTERVAL:
            return None
        self.reasked_at = now
        return oldest

    def ask_soon(self, nursery: trio.Nursery, peer: str) -> None:
        self.asked_at[peer] = trio.current_time()
        nursery.start_soon(self.ask, peer)

    async def ask(self, peer: str) -> None:
        """Ask ``peer`` whom it knows, and put what it lists in the book."""
        try:
            with trio.move_on_after(EXCHANGE_TIMEOUT):
                stream = Libp2pStream(await self._open(peer), peer)
                try:
                    listing = await peer_exchange.ask(stream, self._credentials)
                finally:
                    await stream.aclose()
                self.admitted.add(peer)
                new = self._book.learn(listing)
                self.counts["learned"] += new
                if new:
                    log.info("peers learned", peer=peer, new=new, listed=len(listing))
        except StreamClosed as exc:
            # not answered (maybe asked too soon after a reconnection): ask again once the
            # answerer's window has passed, not a whole interval later
            self.asked_at[peer] = trio.current_time() - EXCHANGE_INTERVAL + ASKS_APART
            log.debug("peer exchange failed", peer=peer, error=str(exc)[:120])
        except Exception as exc:  # SyncProtocolError, or anything else a hostile answer provokes
            self._refused_by(peer, exc)

    async def answer(self, stream) -> None:
        """The stream handler: answer one ask on a py-libp2p stream."""
        peer = str(stream.muxed_conn.peer_id)
        await self.answer_on(Libp2pStream(stream, peer))

    async def answer_on(self, wrapped: PeerStream) -> None:
        """``answer`` on a stream of ours (its ``peer`` is the asker)."""
        peer = wrapped.peer
        now = trio.current_time()
        if now - self.answered_at.get(peer, -ASKS_APART) < ASKS_APART:
            # an honest member asks on connecting and then at most every EXCHANGE_INTERVAL: this is a
            # flood (or a quick reconnection); closed before reading, counted, logged quietly
            self.counts["too_soon"] += 1
            log.debug("peer exchange asked too soon", peer=peer)
            await wrapped.abort()  # a reset: nothing of the ask is read or kept
            return
        self.answered_at[peer] = now
        try:
            with trio.move_on_after(EXCHANGE_TIMEOUT):
                await peer_exchange.answer(wrapped, self._credentials, self._listable(), on_checked=self.admitted.add)
                self.counts["answered"] += 1
        except StreamClosed as exc:
            log.debug("peer exchange failed", peer=peer, error=str(exc)[:120])
        except Exception as exc:  # never into py-libp2p: it would end the connection, or the host
            self._refused_by(peer, exc)
        finally:
            await wrapped.aclose()

    def _listable(self):
        """The connected peers whose tickets we checked, with their addresses, read only when
        listed (after the asker's ticket is checked and it is admitted): two spokes asking a hub
        at once were each listed nothing (neither admitted, or even connected, when the other's
        listing was made) and met only 30 s later, at the next ask."""
        for peer in self._connected():
            if peer in self.admitted:
                yield peer, self._addresses_of(peer)

    def _refused_by(self, peer: str, exc: Exception) -> None:
        self.counts["refused"] += 1
        self.strangers.add(peer)  # not admitted, another cluster's, or breaking the protocol
        self.admitted.discard(peer)
        log.warning("peer exchange refused", peer=peer, reason=str(exc)[:200])

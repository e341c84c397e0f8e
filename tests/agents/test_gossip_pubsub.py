"""A pubsub stream whose negotiation fails is opened again (``agents/net/gossip_pubsub.py``).

py-libp2p 0.8.1 retried only a muxer that was not ready; a failed protocol negotiation left
the peer unregistered for good: we kept every message for it and never sent one.
"""

from __future__ import annotations

import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.peer.id import ID

from agents.net import p2p
from tests.agents.gossip_pair import heard, start_pair

FAILED_NEGOTIATIONS = 3  # the pair makes one connection: past the first, only a retry tries again


async def test_gossip_flows_after_the_first_pubsub_stream_negotiations_fail() -> None:
    failed: list[ID] = []

    def cut_negotiations(dialler: p2p.Libp2pNetwork) -> None:
        opens = dialler.host.new_stream

        async def negotiation_cut(peer_id, protocol_ids):  # as when the peer's answer comes too late
            if any("meshsub" in p for p in protocol_ids) and len(failed) < FAILED_NEGOTIATIONS:
                failed.append(peer_id)
                raise StreamFailure(f"failed to open a stream to peer {peer_id}")
            return await opens(peer_id, protocol_ids)

        dialler.host.new_stream = negotiation_cut

    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "negotiation", cut_negotiations)
        with trio.fail_after(30):
            while ID.from_base58(listener.peer_id) not in dialler._pubsub.peers:
                await trio.sleep(0.1)
        assert failed == [ID.from_base58(listener.peer_id)] * FAILED_NEGOTIATIONS

        # the dialler's gossip reaches the listener: only its own stream can carry it
        received = await heard(dialler, listener)
        assert received.startswith(b"probe "), received
        nursery.cancel_scope.cancel()


async def test_two_opens_for_one_peer_at_once_make_one_stream() -> None:
    """Each connection's notification starts its own open loop: side by side, the second waits
    and finds the peer registered (py-libp2p alone opened twice, and the second stream's
    registration overwrote the first's queue, leaking its sending task)."""
    pubsub_opens: list[ID] = []

    def slow_opens(dialler: p2p.Libp2pNetwork) -> None:
        opens = dialler.host.new_stream

        async def slow_open(peer_id, protocol_ids):  # long enough for a second open to start beside it
            if any("meshsub" in p for p in protocol_ids):
                pubsub_opens.append(peer_id)
                await trio.sleep(0.5)
            return await opens(peer_id, protocol_ids)

        dialler.host.new_stream = slow_open

    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "one-open", slow_opens)
        listener_id = ID.from_base58(listener.peer_id)
        with trio.fail_after(30):
            while not pubsub_opens:  # the connection's own open has begun
                await trio.sleep(0.01)
            await dialler._pubsub._handle_new_peer(listener_id)  # a second connection's, meanwhile
        assert listener_id in dialler._pubsub.peers
        assert pubsub_opens == [listener_id]
        nursery.cancel_scope.cancel()


async def test_a_peer_that_speaks_no_pubsub_protocol_is_not_retried() -> None:
    """Identify listed the peer's protocols and no pubsub one: a failed negotiation is final,
    as in py-libp2p (a retry loop would knock on it every 10 s for as long as it stays)."""
    attempts: list[ID] = []

    def no_pubsub_spoken(dialler: p2p.Libp2pNetwork) -> None:
        async def refused(peer_id, protocol_ids):
            if any("meshsub" in p for p in protocol_ids):
                attempts.append(peer_id)
                # what identify records of a peer without pubsub; set with no await before the
                # failure, so what identify itself later records cannot come between
                dialler.host.get_peerstore().set_protocols(peer_id, ["/ipfs/ping/1.0.0"])
                raise StreamFailure(f"failed to negotiate a protocol with peer {peer_id}")
            return await opens(peer_id, protocol_ids)

        opens = dialler.host.new_stream
        dialler.host.new_stream = refused

    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "no-pubsub", no_pubsub_spoken)
        listener_id = ID.from_base58(listener.peer_id)
        with trio.fail_after(30):
            while not attempts:  # the connection's own open has failed
                await trio.sleep(0.01)
            tried = len(attempts)
            # a retrying open would keep trying (0.5 s, 1 s, ...) while the pair stays connected
            await dialler._pubsub._handle_new_peer_with_retry(listener_id)
        assert len(attempts) == tried + 1
        assert listener_id not in dialler._pubsub.peers
        nursery.cancel_scope.cancel()

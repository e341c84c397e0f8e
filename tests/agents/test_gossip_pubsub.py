"""Our pubsub (``agents/net/gossip_pubsub.py``): a pubsub stream whose negotiation fails is
opened again, and messages waiting for one peer leave in one write.

py-libp2p 0.8.1 retried only a muxer that was not ready; a failed protocol negotiation left
the peer unregistered for good: we kept every message for it and never sent one. And it
wrote every queued RPC on its own, however many waited behind it.
"""

from __future__ import annotations

import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

from agents.net import p2p
from agents.net.gossip_pubsub import COALESCED_BYTES, coalesce
from tests.agents.gossip_pair import heard, on_pubsub_opens, pair_once_opening, start_pair

FAILED_NEGOTIATIONS = 3  # the pair makes one connection: past the first, only a retry tries again


async def test_gossip_flows_after_the_first_pubsub_stream_negotiations_fail() -> None:
    failed: list[ID] = []

    async def negotiation_cut(_dialler, peer_id: ID) -> None:  # as when the peer's answer comes too late
        if len(failed) < FAILED_NEGOTIATIONS:
            failed.append(peer_id)
            raise StreamFailure(f"failed to open a stream to peer {peer_id}")

    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "negotiation", on_pubsub_opens(negotiation_cut))
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

    async def slow_open(_dialler, peer_id: ID) -> None:  # long enough for a second open to start beside it
        pubsub_opens.append(peer_id)
        await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        dialler, listener_id = await pair_once_opening(nursery, "one-open", slow_open, pubsub_opens)
        with trio.fail_after(30):
            await dialler._pubsub._handle_new_peer(listener_id)  # a second connection's, meanwhile
        assert listener_id in dialler._pubsub.peers
        assert pubsub_opens == [listener_id]
        nursery.cancel_scope.cancel()


async def test_a_peer_that_speaks_no_pubsub_protocol_is_not_retried() -> None:
    """Identify listed the peer's protocols and no pubsub one: a failed negotiation is final,
    as in py-libp2p (a retry loop would knock on it every 10 s for as long as it stays)."""
    attempts: list[ID] = []

    async def refused(dialler: p2p.Libp2pNetwork, peer_id: ID) -> None:
        attempts.append(peer_id)
        # what identify records of a peer without pubsub; set with no await before the
        # failure, so what identify itself later records cannot come between
        dialler.host.get_peerstore().set_protocols(peer_id, ["/ipfs/ping/1.0.0"])
        raise StreamFailure(f"failed to negotiate a protocol with peer {peer_id}")

    async with trio.open_nursery() as nursery:
        dialler, listener_id = await pair_once_opening(nursery, "no-pubsub", refused, attempts)
        with trio.fail_after(30):
            tried = len(attempts)
            # a retrying open would keep trying (0.5 s, 1 s, ...) while the pair stays connected
            await dialler._pubsub._handle_new_peer_with_retry(listener_id)
        assert len(attempts) == tried + 1
        assert listener_id not in dialler._pubsub.peers
        nursery.cancel_scope.cancel()


RECORD = b"our signed peer record"


def _published(*payloads: bytes, record: bytes = RECORD) -> rpc_pb2.RPC:
    rpc = rpc_pb2.RPC(senderRecord=record)
    for payload in payloads:
        message = rpc.publish.add()
        message.data = payload
        message.topicIDs.append("swarm/t/events")
    return rpc


def _graft() -> rpc_pb2.RPC:
    rpc = rpc_pb2.RPC(senderRecord=RECORD)  # the same record: only its control stops a batch
    rpc.control.graft.add().topicID = "swarm/t/events"
    return rpc


def _payloads(rpc: rpc_pb2.RPC) -> list[bytes]:
    return [message.data for message in rpc.publish]


def test_published_messages_waiting_together_leave_as_one_rpc_in_their_order() -> None:
    queue = RpcQueue()
    first, second, third = _published(b"1"), _published(b"2", b"3"), _published(b"4")
    for rpc in (second, third):
        assert queue.push(rpc)
    sent = coalesce(first, queue)
    assert _payloads(sent) == [b"1", b"2", b"3", b"4"]
    assert sent.senderRecord == first.senderRecord
    assert len(queue) == 0
    # py-libp2p queues one RPC object for many peers: none of them is changed
    assert (_payloads(first), _payloads(second), _payloads(third)) == ([b"1"], [b"2", b"3"], [b"4"])


def test_control_and_subscriptions_are_never_merged_nor_passed() -> None:
    queue = RpcQueue()
    graft, later = _graft(), _published(b"3")
    for rpc in (_published(b"2"), graft, later):
        assert queue.push(rpc)
    assert _payloads(coalesce(_published(b"1"), queue)) == [b"1", b"2"]  # stops at the GRAFT
    assert len(queue) == 2
    # a control RPC itself goes alone, and what follows it waits its turn
    queue = RpcQueue()
    assert queue.push(_published(b"2"))
    assert coalesce(graft, queue) is graft and len(queue) == 1

    subscribing = _published(b"1")
    subscribing.subscriptions.add(subscribe=True, topicid="swarm/t/events")
    queue = RpcQueue()
    assert queue.push(_published(b"2"))
    assert coalesce(subscribing, queue) is subscribing and len(queue) == 1


def test_the_priority_lane_still_goes_first() -> None:
    queue = RpcQueue()
    assert queue.push(_published(b"2"))
    assert queue.push(_graft(), priority=True)
    assert _payloads(coalesce(_published(b"1"), queue)) == [b"1"]  # the GRAFT is popped next
    assert len(queue) == 2


def test_a_batch_stays_within_its_size_and_one_sender_record() -> None:
    queue = RpcQueue()
    big = b"x" * (COALESCED_BYTES // 3)
    for rpc in (_published(big), _published(big), _published(big)):
        assert queue.push(rpc)
    sent = coalesce(_published(b"1"), queue)
    assert len(sent.publish) == 3 and sent.ByteSize() <= COALESCED_BYTES
    assert len(queue) == 1

    queue = RpcQueue()
    newer = _published(b"2", record=b"a newer record, our addresses changed")
    assert queue.push(newer)
    assert _payloads(coalesce(_published(b"1"), queue)) == [b"1"]
    assert len(queue) == 1 and newer.senderRecord == b"a newer record, our addresses changed"

    queue = RpcQueue()
    assert queue.push(_published(b"2"))
    larger = _published(b"x" * COALESCED_BYTES)
    assert coalesce(larger, queue) is larger and len(queue) == 1  # alone, and nothing waits behind it


def test_messages_without_a_sender_record_are_batched_without_one() -> None:
    first = rpc_pb2.RPC()
    first.publish.add(data=b"1", topicIDs=["swarm/t/events"])
    second = rpc_pb2.RPC()
    second.publish.add(data=b"2", topicIDs=["swarm/t/events"])
    queue = RpcQueue()
    assert queue.push(second)
    sent = coalesce(first, queue)
    assert _payloads(sent) == [b"1", b"2"] and not sent.HasField("senderRecord")


BURST = 12  # fewer than py-libp2p's 32-RPC queue: none is refused


async def test_a_burst_queued_behind_a_slow_write_reaches_the_peer_in_fewer_writes() -> None:
    """Over real hosts: while one write is held up, the dialler publishes a burst; the burst
    then leaves in fewer writes than messages (py-libp2p's loop: one write each) and every
    message arrives."""
    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "coalesce")
        await heard(dialler, listener)  # the pair's streams and meshes are up
        pubsub = dialler._pubsub
        writes = pubsub.write_msg
        held, release, batches = trio.Event(), trio.Event(), []

        async def counted_write(stream, rpc):
            if rpc.publish:
                if not held.is_set():  # the first: hold it while the burst queues behind
                    held.set()
                    await release.wait()
                batches.append(_payloads(rpc))
            return await writes(stream, rpc)

        pubsub.write_msg = counted_write
        burst = [b"burst %d" % i for i in range(BURST)]
        with trio.fail_after(30):
            await dialler.publish(b"held")
            await held.wait()
            for payload in burst:
                await dialler.publish(payload)
            release.set()
            arrived = set()
            while not set(burst) <= arrived:
                arrived.add(await listener.gossip.receive())
        sent = [payload for batch in batches for payload in batch]
        assert set(burst) <= set(sent)
        assert len(batches) <= 3, batches  # the held one, the burst (a heartbeat's GRAFT may split it)
        nursery.cancel_scope.cancel()

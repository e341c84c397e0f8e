"""Signed peer records are checked once per sender and sealed once per host
(``agents/net/peer_records.py``), on real libp2p hosts.

py-libp2p attaches the sender's signed record to every pubsub RPC; the wrappers must keep
what it guaranteed: a record we send is ours and valid, a new interval asks py-libp2p again,
and a forged or misattributed record is still refused however often a good one was seen.
"""

from __future__ import annotations

import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
import libp2p.pubsub.utils as pubsub_utils
import trio
from libp2p.peer import peerstore
from libp2p.peer.envelope import consume_envelope
from libp2p.pubsub.pb import rpc_pb2

from agents.net import peer_records
from agents.net.p2p import Libp2pNetwork
from tests.builders import credentials

DOMAIN = "libp2p-peer-record"


def _network(name: str) -> Libp2pNetwork:
    creds = credentials(name, "observer")
    return Libp2pNetwork(creds.identity, creds.cluster, ["/ip4/127.0.0.1/tcp/0"], mdns=False, credentials=creds)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _counting(monkeypatch, name: str) -> list:
    """Record the arguments of each call ``peer_records`` makes to py-libp2p's own function
    ``name`` (the hosts' own tasks may call it too, for RPCs of their own)."""
    calls: list = []
    original = getattr(peer_records, name)

    def counted(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(peer_records, name, counted)
    return calls


async def test_our_record_is_sealed_once_per_interval_and_is_ours_and_valid(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(peer_records, "_clock", clock)
    seals = _counting(monkeypatch, "_original_seal")
    one, other = _network("observer-0"), _network("observer-1")
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await nursery.start(other.run)
        # where pubsub and gossipsub look it up when they build an RPC
        assert gossipsub_module.env_to_send_in_RPC is peer_records.seal_once
        assert pubsub_module.env_to_send_in_RPC is peer_records.seal_once
        first, _ = gossipsub_module.env_to_send_in_RPC(one.host)
        for _ in range(5):
            clock.now += peer_records.RESEAL_CHECK_S / 10
            assert gossipsub_module.env_to_send_in_RPC(one.host)[0] == first
        assert [host for (host,) in seals].count(one.host) == 1
        _, record = consume_envelope(first, DOMAIN)  # raises on a bad signature
        assert record.peer_id == one.host.get_id()
        assert {str(a) for a in record.addrs} == {str(a) for a in one.host.get_addrs()}

        theirs, _ = gossipsub_module.env_to_send_in_RPC(other.host)  # each host its own record
        assert consume_envelope(theirs, DOMAIN)[1].peer_id == other.host.get_id()

        clock.now += peer_records.RESEAL_CHECK_S  # the interval is over: py-libp2p is asked again
        again, _ = gossipsub_module.env_to_send_in_RPC(one.host)
        assert [host for (host,) in seals].count(one.host) == 2
        assert again == first  # same addresses, so the same record

        # identify reissues the record when the addresses change (a newer sequence number), and a
        # peer holding the newer one refuses an older one with the whole RPC: the very next RPC
        # must carry the newer record, whatever the interval
        newer = peerstore.issue_and_cache_local_record(one.host)
        one_id = one.host.get_id()
        assert pubsub_utils.maybe_consume_signed_record(_rpc(newer), other.host, one_id)
        assert not pubsub_utils.maybe_consume_signed_record(_rpc(first), other.host, one_id), \
            "py-libp2p took an older record after a newer one: the hazard this test guards is gone"
        assert gossipsub_module.env_to_send_in_RPC(one.host)[0] == newer
        nursery.cancel_scope.cancel()


def _rpc(record: bytes) -> rpc_pb2.RPC:
    rpc = rpc_pb2.RPC()
    rpc.senderRecord = record
    return rpc


async def test_a_record_is_checked_once_and_a_forged_or_misattributed_one_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(peer_records, "_clock", _Clock())
    monkeypatch.setattr(peer_records, "_verified", type(peer_records._verified)())
    checks = _counting(monkeypatch, "_original")
    receiver, sender, third = _network("observer-0"), _network("observer-1"), _network("observer-2")
    async with trio.open_nursery() as nursery:
        for network in (receiver, sender, third):
            await nursery.start(network.run)
        record, _ = peer_records.seal_once(sender.host)
        sender_id, third_id = sender.host.get_id(), third.host.get_id()

        assert peer_records.consume_once(_rpc(record), receiver.host, sender_id)
        assert peer_records.consume_once(_rpc(record), receiver.host, sender_id)
        assert len(checks) == 1, "the same sender's same record was checked again"

        forged = bytearray(record)
        forged[-1] ^= 1  # the signature's last byte
        assert not peer_records.consume_once(_rpc(bytes(forged)), receiver.host, sender_id)
        assert not peer_records.consume_once(_rpc(record), receiver.host, third_id), \
            "a record of one peer was accepted from another"
        assert len(checks) == 3  # neither was taken on the strength of the good one
        assert not peer_records.consume_once(_rpc(bytes(forged)), receiver.host, sender_id)
        assert len(checks) == 4, "a refused record must be checked (and refused) every time"
        nursery.cancel_scope.cancel()

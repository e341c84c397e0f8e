"""Peer exchange: one bootstrap address is enough, junk costs a bounded book, strangers learn nothing.

Real libp2p hosts over loopback sockets (no mDNS): a member that knows only one
peer comes to be connected to the peers that one knows.
"""

from __future__ import annotations

from itertools import pairwise

import multiaddr
import pytest
import trio

from agents import syncwire
from agents.core.admission import Credentials, issue
from agents.core.identity import Identity
from agents.net import peer_book, peer_exchange
from agents.net.base import StreamClosed
from agents.net.p2p import Libp2pNetwork
from agents.net.peer_book import PeerBook, listed_addresses
from tests.builders import AUTHORITY, CLUSTER, credentials, gate, identity


def _network(creds: Credentials, bootstrap: list[str] = ()) -> Libp2pNetwork:
    return Libp2pNetwork(creds.identity, creds.cluster, ["/ip4/127.0.0.1/tcp/0"], bootstrap, mdns=False,
                         credentials=creds)


def _address(network: Libp2pNetwork) -> str:
    address = network.addresses()[0]
    return address if "/p2p/" in address else f"{address}/p2p/{network.peer_id}"


async def test_members_that_know_only_a_hub_find_each_other_through_it() -> None:
    hub = _network(credentials("hub", "observer"))
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        spokes = [_network(credentials(f"spoke-{i}", "scorer"), [_address(hub)]) for i in range(3)]
        for spoke in spokes:
            await nursery.start(spoke.run)
        ids = {s.peer_id for s in spokes}
        with trio.fail_after(30):
            while not all(ids - {s.peer_id} <= set(s.connected_peers()) for s in spokes):
                await trio.sleep(0.2)
        # three pairs of spokes connected, each by one side that learned the other from the hub
        assert sum(s.counters()["peers_learned"] for s in spokes) >= 3
        assert all(s.counters()["peers_refused"] == 0 for s in spokes)
        assert hub.exchange["answered"] >= 3
        nursery.cancel_scope.cancel()


async def test_a_peer_without_a_ticket_of_the_cluster_learns_nothing_and_is_counted() -> None:
    hub = _network(credentials("hub", "observer"))
    other = Identity(b"\x07" * 32)
    stranger_creds = Credentials(other, issue(Identity(b"\x08" * 32), CLUSTER, other.peer_id, "scorer"), gate())
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        member = _network(credentials("member", "scorer"), [_address(hub)])
        await nursery.start(member.run)
        stranger = _network(stranger_creds, [_address(hub)])
        await nursery.start(stranger.run)
        with trio.fail_after(30):
            # the hub refuses the stranger's ask, and the stranger's answer to its own ask
            while hub.exchange["refused"] < 2:
                await trio.sleep(0.2)
        assert stranger.peers.learned == {}, "a peer the authority never admitted was given the hub's peers"
        assert member.peer_id not in stranger.connected_peers()
        nursery.cancel_scope.cancel()


async def test_asks_sooner_than_the_window_are_closed_unanswered_counted_and_no_refusal(monkeypatch) -> None:
    from agents.net import exchanging

    monkeypatch.setattr(exchanging, "ASKS_APART", 2.0)  # the window, short enough to see it end
    hub = _network(credentials("hub", "observer"))
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        member = _network(credentials("member", "scorer"), [_address(hub)])
        await nursery.start(member.run)
        with trio.fail_after(20):  # the member asks once on connecting
            while hub.exchange["answered"] < 1:
                await trio.sleep(0.05)
        for _ in range(5):  # a flood: the same peer again at once
            await member.exchanges.ask(hub.peer_id)
        assert hub.exchange["too_soon"] == 5 and hub.exchange["answered"] == 1
        assert hub.counters()["peer_asks_too_soon"] == 5
        # the asker sees a closed conversation, not a refusal: the hub stays a cluster peer
        assert member.counters()["peers_refused"] == 0 and hub.peer_id not in member.exchanges.strangers
        await trio.sleep(2.1)
        await member.exchanges.ask(hub.peer_id)
        with trio.fail_after(5):  # the hub counts once its answer is sent, maybe after we read it
            while hub.exchange["answered"] < 2:
                await trio.sleep(0.05)
        assert hub.exchange["too_soon"] == 5, "the ask after the window was answered, not refused"
        nursery.cancel_scope.cancel()


class _Scripted:
    """A stream whose peer answers with ``frame`` (the asker's side of a hostile answerer)."""

    def __init__(self, peer: str, frame: bytes) -> None:
        self.peer, self._frame, self.sent = peer, frame, []

    async def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    async def receive(self, limit: int = 0) -> bytes:
        if len(self._frame) > limit:
            raise StreamClosed("over the limit")
        return self._frame

    async def aclose(self) -> None: ...

    async def abort(self) -> None: ...


def _answer(peers: object) -> bytes:
    hub = credentials("hub", "observer")
    return syncwire.encode_message({"type": "peers", "ticket": hub.ticket.wire(), "peers": peers})


@pytest.mark.parametrize(("peers", "says"), [
    ([[identity(f"p{i}").peer_id, ["/ip4/10.0.0.1/tcp/4001"]] for i in range(33)], "at most 32 peers"),
    ([["not-a-peer-id", ["/ip4/10.0.0.1/tcp/4001"]]], "is not a peer id"),
    ([[identity("p").peer_id, ["/ip4/10.0.0.1/udp/4001"]]], "TCP port"),
    ([[identity("p").peer_id, ["/ip4/10.0.0.1/tcp/4001/p2p-circuit"]]], "TCP port"),
    ([[identity("p").peer_id, ["/ip4/10.0.0.1/tcp/" + "1" * 300]]], "at most 200 characters"),
    ([[identity("p").peer_id, []]], "1 to 4 addresses"),
    ("everyone", "at most 32 peers"),
])
async def test_a_listing_that_breaks_a_rule_is_refused_whole(peers: object, says: str) -> None:
    with pytest.raises(peer_exchange.PeerExchangeError, match=says):
        await peer_exchange.ask(_Scripted(credentials("hub", "observer").identity.peer_id, _answer(peers)),
                                credentials("asker", "scorer"))


async def test_an_integer_too_long_for_python_is_a_refusal_not_a_crash() -> None:
    frame = b'{"type": "ask", "cluster": ' + b"9" * 5000 + b"}"  # json.loads raises a bare ValueError
    with pytest.raises(peer_exchange.PeerExchangeError):
        syncwire.decode_message(frame, "ask", peer_exchange.PeerExchangeError)
    with pytest.raises(syncwire.SyncProtocolError):
        syncwire.decode_message(frame.replace(b"ask", b"summary"), "summary")


def test_an_answerer_lists_only_addresses_an_asker_accepts() -> None:
    assert peer_exchange.valid_address("/ip4/10.0.0.1/tcp/4001")
    assert peer_exchange.valid_address("/dns4/observer/tcp/4001")
    for junk in ("/ip4/10.0.0.1/tcp/1/tcp/2", "/dns4/" + "a" * 300 + "/tcp/1", "/ip4/10.0.0.1/udp/1", "nonsense"):
        assert not peer_exchange.valid_address(junk), junk


async def test_an_answer_lists_at_most_32_connected_peers_and_never_the_asker() -> None:
    asker = credentials("asker", "scorer")
    hub = credentials("hub", "observer")
    connected = [(identity(f"p{i}").peer_id, [f"/ip4/10.0.0.{i}/tcp/4001"]) for i in range(40)]
    connected.append((asker.identity.peer_id, ["/ip4/10.0.1.1/tcp/4001"]))
    ask_frame = syncwire.encode_message({"type": "ask", "cluster": CLUSTER, "ticket": asker.ticket.wire()})
    stream = _Scripted(asker.identity.peer_id, ask_frame)
    assert await peer_exchange.answer(stream, hub, connected) == peer_exchange.MAX_LISTED
    listed = syncwire.decode_message(stream.sent[0], "peers")["peers"]
    assert len(listed) == 32 and asker.identity.peer_id not in {p for p, _ in listed}
    again = _Scripted(asker.identity.peer_id, ask_frame)
    await peer_exchange.answer(again, hub, reversed(connected))
    assert syncwire.decode_message(again.sent[0], "peers")["peers"] == listed, "the choice depends on arrival order"


async def test_of_two_peers_asking_a_hub_at_once_the_answer_to_the_second_lists_the_first() -> None:
    """Both asks are read before either is answered (as two spokes connecting at once): the
    hub admits an asker once its ticket is checked, before it reads whom to list, so the
    second answer lists the first asker. Listing only peers admitted before the ask was
    read left both unlisted, and the pair met only at the next ask, 30 s later."""
    from agents.net.exchanging import PeerExchanges

    hub = credentials("hub", "observer")
    askers = [credentials(f"spoke-{i}", "scorer") for i in range(2)]
    addresses = {a.identity.peer_id: [f"/ip4/10.0.0.{i}/tcp/4001"] for i, a in enumerate(askers)}
    exchanges = PeerExchanges(hub, PeerBook(hub.identity.peer_id), open_stream=None,  # type: ignore[arg-type]
                              connected=lambda: list(addresses), addresses_of=addresses.__getitem__)
    both_read = trio.Event()
    read = []

    class Asking(_Scripted):
        async def receive(self, limit: int = 0) -> bytes:
            read.append(self.peer)
            if len(read) == 2:
                both_read.set()
            await both_read.wait()
            return await super().receive(limit)

    streams = [Asking(a.identity.peer_id, syncwire.encode_message(
        {"type": "ask", "cluster": CLUSTER, "ticket": a.ticket.wire()})) for a in askers]
    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(exchanges.answer_on, stream)
    listed = [{p for p, _ in syncwire.decode_message(s.sent[0], "peers")["peers"]} for s in streams]
    # one of them is listed to the other (which depends on which ask trio answers first)
    assert sorted(map(len, listed)) == [0, 1], listed
    assert (listed[0] | listed[1]) & {a.identity.peer_id for a in askers} == listed[0] | listed[1], listed
    assert exchanges.counts["answered"] == 2


def test_the_book_dials_up_to_the_bound_configured_peers_first_whatever_it_was_given() -> None:
    from libp2p.peer.peerinfo import info_from_p2p_addr
    book = PeerBook(identity("me").peer_id)
    learned = [(identity(f"p{i}").peer_id, [f"/ip4/10.0.0.{i}/tcp/4001"]) for i in range(40)]
    assert book.learn(learned) == 40 and book.learn(learned) == 0
    assert len(book.to_dial(set())) == peer_book.ACTIVE_PEERS
    few = {identity(f"p{i}").peer_id for i in range(5)}
    assert len(book.to_dial(few)) == peer_book.ACTIVE_PEERS - 5 and not few & {str(i.peer_id) for i in book.to_dial(few)}
    many = {identity(f"q{i}").peer_id for i in range(peer_book.ACTIVE_PEERS)}
    assert book.to_dial(many) == []
    boots = [identity(f"boot{i}").peer_id for i in range(49)]  # a full bootstrap list of a 50-member cluster
    for boot in boots:
        book.configure(info_from_p2p_addr(multiaddr.Multiaddr(f"/dns4/b/tcp/4001/p2p/{boot}")))
    chosen = [str(i.peer_id) for i in book.to_dial(few)]
    assert len(chosen) == peer_book.ACTIVE_PEERS - 5 and set(chosen) <= set(boots)
    other = PeerBook(identity("someone else").peer_id)
    for boot in boots:
        other.configure(info_from_p2p_addr(multiaddr.Multiaddr(f"/dns4/b/tcp/4001/p2p/{boot}")))
    assert [str(i.peer_id) for i in other.to_dial(few)] != chosen, "every member dials the same few"


def test_a_learned_peer_is_forgotten_after_failed_dials_and_the_book_is_bounded() -> None:
    book = PeerBook(identity("me").peer_id)
    honest = identity("honest").peer_id
    book.learn([(honest, ["/ip4/10.0.0.1/tcp/4001"])])
    book.dialled(honest, ok=True)  # connected once: junk does not push it out
    junk = [(identity(f"junk{i}").peer_id, ["/ip4/10.9.9.9/tcp/1"]) for i in range(peer_book.MAX_LEARNED + 50)]
    book.learn(junk)
    assert len(book.learned) == peer_book.MAX_LEARNED and honest in book
    assert junk[0][0] not in book and junk[-1][0] in book, "the oldest never-connected entries make room"
    last = junk[-1][0]
    for n in range(peer_book.FORGET_AFTER):
        book.dialled(last, ok=False, now=100.0 * n)
    assert last not in book


def test_a_listing_adds_to_a_peers_addresses_and_never_replaces_them() -> None:
    book = PeerBook(identity("me").peer_id)
    peer = identity("honest").peer_id
    book.learn([(peer, ["/ip4/10.0.0.1/tcp/4001"])])
    book.learn([(peer, ["/ip4/6.6.6.6/tcp/1", "/ip4/6.6.6.7/tcp/1"])])  # a hostile listing of an honest peer
    assert [str(a) for a in book.learned[peer].addrs] == ["/ip4/10.0.0.1/tcp/4001", "/ip4/6.6.6.6/tcp/1",
                                                          "/ip4/6.6.6.7/tcp/1"]


def test_a_peer_whose_dials_fail_waits_longer_each_time_and_does_not_hold_a_slot() -> None:
    from libp2p.peer.peerinfo import info_from_p2p_addr
    book = PeerBook(identity("me").peer_id)
    dead = identity("dead").peer_id
    book.configure(info_from_p2p_addr(multiaddr.Multiaddr(f"/ip4/10.0.0.9/tcp/4001/p2p/{dead}")))
    book.learn([(identity(f"p{i}").peer_id, [f"/ip4/10.0.0.{i}/tcp/4001"]) for i in range(40)])
    assert str(book.to_dial(set(), now=0.0)[0].peer_id) == dead  # bootstrap first
    book.dialled(dead, ok=False, now=0.0)
    assert dead not in {str(i.peer_id) for i in book.to_dial(set(), now=3.0)}
    assert str(book.to_dial(set(), now=4.0)[0].peer_id) == dead
    book.dialled(dead, ok=False, now=4.0)
    assert dead not in {str(i.peer_id) for i in book.to_dial(set(), now=11.0)}
    assert dead in book, "a bootstrap peer is never forgotten"


def test_a_member_at_the_bound_probes_one_known_peer_at_a_time_in_a_rotation() -> None:
    book = PeerBook(identity("me").peer_id)
    others = [identity(f"p{i}").peer_id for i in range(20)]
    book.learn([(p, ["/ip4/10.0.0.1/tcp/4001"]) for p in others])
    connected = set(others[:peer_book.ACTIVE_PEERS])
    assert book.to_dial(connected) == []
    probes = [str(book.probe(connected).peer_id) for _ in range(8)]
    assert sorted(set(probes)) == sorted(set(others) - connected), "every unconnected peer is probed in turn"
    assert book.probe(set(others[:8]) | {identity(f"q{i}").peer_id for i in range(peer_book.PROBE_BELOW)}) is None


def test_a_wildcard_address_is_listed_with_the_ip_its_connection_comes_from() -> None:
    declared = [multiaddr.Multiaddr("/ip4/0.0.0.0/tcp/4001/p2p/" + identity("p").peer_id),
                multiaddr.Multiaddr("/ip4/192.168.1.5/tcp/4001")]
    observed = [multiaddr.Multiaddr("/ip4/10.0.2.7/tcp/51234")]
    assert listed_addresses(declared, observed) == ["/ip4/10.0.2.7/tcp/4001", "/ip4/192.168.1.5/tcp/4001"]
    assert listed_addresses(declared[:1], []) == []


async def test_a_dns_address_is_dialled_at_the_ips_its_name_has_now() -> None:
    from libp2p.peer.peerinfo import info_from_p2p_addr
    info = info_from_p2p_addr(multiaddr.Multiaddr(f"/dns4/localhost/tcp/4001/p2p/{identity('p').peer_id}"))
    found = await peer_book.resolved(info)
    assert [str(a) for a in found.addrs] == ["/ip4/127.0.0.1/tcp/4001"]
    nowhere = info_from_p2p_addr(multiaddr.Multiaddr(f"/dns4/no-such-host.invalid/tcp/1/p2p/{identity('p').peer_id}"))
    assert (await peer_book.resolved(nowhere)).addrs == []


assert AUTHORITY  # the builders' authority admits every member above but the stranger


def test_a_peer_found_by_mdns_is_dialled_within_the_bound_and_never_forgotten() -> None:
    from libp2p.peer.peerinfo import info_from_p2p_addr
    book = PeerBook(identity("me").peer_id)
    found = identity("neighbour").peer_id
    book.discover(info_from_p2p_addr(multiaddr.Multiaddr(f"/ip4/10.0.0.9/tcp/4001/p2p/{found}")))
    for n in range(peer_book.FORGET_AFTER * 3):  # a partition: every dial fails, for a long time
        book.dialled(found, ok=False, now=100.0 * n)
    assert [str(i.peer_id) for i in book.to_dial(set(), now=1000.0)] == [found], "a partition outlasted its heal"
    book.learn([(found, ["/ip4/6.6.6.6/tcp/1"])])  # a listing cannot replace what mDNS found
    assert str(book.learned[found].addrs[0]) == "/ip4/10.0.0.9/tcp/4001"
    many = {identity(f"q{i}").peer_id for i in range(peer_book.ACTIVE_PEERS)}
    assert book.to_dial(many) == []


async def test_py_libp2p_dials_nobody_of_its_own_accord() -> None:
    """Its auto-connector dials every peer its peerstore holds (mDNS fills it) up to 50,
    at start and every 10 s: a peer whose address is there but not in the book stays apart."""
    other = _network(credentials("other", "scorer"))
    quiet = _network(credentials("quiet", "scorer"))
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        from libp2p.peer.id import ID
        quiet.host.get_peerstore().add_addrs(ID.from_base58(other.peer_id),
                                             [multiaddr.Multiaddr(other.addresses()[0].split("/p2p/")[0])], 3600)
        await nursery.start(quiet.run)
        await trio.sleep(4)
        assert other.peer_id not in quiet.connected_peers()
        nursery.cancel_scope.cancel()


def test_a_member_asks_one_connected_peer_again_an_interval_whatever_its_number_of_peers() -> None:
    """Each peer asked again every ``EXCHANGE_INTERVAL`` made a member's asks grow with its
    peers (fifty peers: more than one stream a second, each with two ticket checks): now one
    peer, the one asked longest ago, every ``REASK_EVERY``, and none asked again sooner than
    ``EXCHANGE_INTERVAL``."""
    from agents.net.exchanging import EXCHANGE_INTERVAL, REASK_EVERY, PeerExchanges

    exchanges = PeerExchanges(credentials("observer-0", "observer"), PeerBook("me"),
                              open_stream=None, connected=list, addresses_of=list)  # type: ignore[arg-type]
    for peers in (3, 50):
        connected = {f"peer-{i:02}" for i in range(peers)}
        exchanges.asked_at = {peer: 0.0 for peer in connected}  # each asked on connecting, at 0
        exchanges.reasked_at = float("-inf")
        asked: list[tuple[float, str]] = []
        for tick in range(1, 601):  # the dial loop's turns over ten minutes
            now = float(tick)
            peer = exchanges.due(connected, now)
            if peer is not None:
                asked.append((now, peer))
                exchanges.asked_at[peer] = now
        gaps = [b[0] - a[0] for a, b in pairwise(asked)]
        assert min(gaps) >= REASK_EVERY, (peers, gaps)
        assert asked[0][0] > EXCHANGE_INTERVAL  # nobody again before its interval is up
        assert len(asked) <= 600 / REASK_EVERY  # one an interval at most, at 3 peers as at 50
        assert len(asked) >= min(peers * 600 / (EXCHANGE_INTERVAL + REASK_EVERY), 600 / REASK_EVERY - 5)
        last: dict[str, float] = {}
        for at, peer in asked:  # the one asked longest ago comes first
            assert at - last.get(peer, 0.0) > EXCHANGE_INTERVAL
            last[peer] = at

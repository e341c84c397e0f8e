"""``Network`` over py-libp2p 0.8.1: TCP, noise only, yamux, gossipsub, mDNS, sync streams.

py-libp2p's defaults break a swarm (see ../shared/ENVIRONMENT.md, beside the repository); this adapter fixes each:

* gossipsub: ``heartbeat_interval=1``, explicit degrees, ``adaptive_gossip_enabled=False``
  and ``spam_protection_enabled=False`` (both silently stop a busy mesh);
  our ``Router`` (``gossip_router.py``): IHAVE names messages by the ids the seen-cache
  holds, and IDONTWANT goes out only for messages of 1 KiB or more;
* security: noise only (no plaintext or secio offered);
* message ids: sha256 of the payload, so the replayed message cache and
  re-publications dedupe by content (the member dedupes by event id too);
* the subscription (32-message queue) is drained at once into our own channel;
* nothing reconnects by itself: we dial bootstrap and mDNS-discovered peers, and
  peers learned from peers (``peer_exchange.py``, ``exchanging.py``, ``peer_book.py``: a bounded active
  view past ``ACTIVE_PEERS``, so one bootstrap address is enough), redial lost ones (after ``unblock_peer``, to skip the 60 s negative cache),
  and check every connected peer's liveness (``liveness.py``: yamux pings, answered by the
  peer's muxer; a blackholed link is disconnected);
* ``new_stream`` is never awaited by a caller that must keep its deadline: py-libp2p
  cleans up a failed open in a shielded scope with no deadline, so streams (sync,
  peer exchange) open in the network's own tasks (``opening.py``), and a peer whose open
  stays stuck has its connections dropped, its sockets severed if a polite close cannot
  get through;
* mDNS callbacks arrive on zeroconf's thread and are handed to trio.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Sequence

import multiaddr
import structlog
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.peer.peerstore import PeerStoreError
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

from agents.core.admission import Credentials
from agents.core.identity import Identity
from agents.logs import adopt_libp2p
from agents.net import peer_exchange, peer_records
from agents.net.base import StreamClosed, StreamHandler
from agents.net.exchanging import EXCHANGE_INTERVAL, PeerExchanges
from agents.net.gossip_pubsub import GossipPubsub
from agents.net.gossip_router import Router
from agents.net.half_open import HalfOpen
from agents.net.liveness import Liveness
from agents.net.opening import DIAL_TIMEOUT, StreamOpener
from agents.net.peer_book import PeerBook, listed_addresses, resolved
from agents.net.streams import (
    CLOSE_TIMEOUT,
    Libp2pStream,
    hear_frames,
    heard_through,
    muxer_ping,
    sever,
)
from agents.net.yamux_credit import credit_half_a_window
from agents.syncproto import PROTOCOL as SYNC_PROTOCOL_ID

log = structlog.get_logger("swarm.net")

credit_half_a_window()  # not a WINDOW_UPDATE frame per read (yamux_credit.py)
adopt_libp2p()  # importing libp2p detached its logger from ours
peer_records.install()  # each peer's signed record checked once, not per gossip RPC

GOSSIP_PROTOCOLS = [TProtocol("/meshsub/1.2.0"), TProtocol("/meshsub/1.1.0"), TProtocol("/meshsub/1.0.0")]
SYNC_PROTOCOL = TProtocol(SYNC_PROTOCOL_ID)
PEERS_PROTOCOL = TProtocol(peer_exchange.PROTOCOL)
DIAL_INTERVAL = 2.0
MESH_LOG_INTERVAL = 10.0  # seconds between debug lines on the events topic's mesh (a member out of it)
SEEN_TTL_S = 120  # gossip message ids remembered, and validation verdicts cached, this long
# The mesh degree (target, low, high), chosen by measurement: fifty members on this 2-core
# machine, ``bench.swarm.propagation(50, rate=1)`` (40 probes a run), the time for a probe to
# reach every member, pooled over the runs, all taken in turn in one hour (stop 42's note;
# sync repairs: deliveries sync brought first):
#   D=3 (2-5):  p50 246, p90 640, p99 1,213 ms; sync repairs 3-20, CPU 6.6-10.8 ms a delivery (3 runs)
#   D=4 (3-6):  p50 211, p90 415, p99 597 ms; sync repairs 1-6, CPU 9.0-12.6 ms (8 runs)
#   D=6 (4-8):  p50 222, p90 578, p99 942 ms; sync repairs 6-8, CPU 10.8-13.7 ms (3 runs)
#   D=8 (6-10): p50 234, p90 1,576, p99 2,148 ms; sync repairs 9, CPU 15.7 ms (1 run)
# Every copy costs each receiver a read and a seen-check and each sender a write (a loopback
# send wakes the receiving process): a wider mesh saves a hop and pays more than the hop on
# a saturated machine; a narrower one loses more to gossip and leaves it to sync.
MESH_DEGREE, MESH_DEGREE_LOW, MESH_DEGREE_HIGH = 4, 3, 6


async def _stay_stopped() -> None:
    """In place of py-libp2p's ``AutoConnector.start``: it stays stopped, so it never dials."""


class Libp2pNetwork:
    """A libp2p host on one cluster's gossip topic. Start it with ``nursery.start(net.run)``."""

    def __init__(
        self,
        identity: Identity,
        cluster: str,
        listen: Sequence[str] = ("/ip4/0.0.0.0/tcp/0",),
        bootstrap: Sequence[str] = (),
        mdns: bool = True,
        validator=None,
        credentials: Credentials | None = None,
    ) -> None:
        self.identity = identity
        self.peer_id = identity.peer_id
        self.cluster = cluster
        self.topic = f"swarm/{cluster}/events"
        self.status_topic = f"swarm/{cluster}/status/1"  # PROTOCOL.md section 12: never folded
        self._listen = [multiaddr.Multiaddr(a) for a in listen]
        self.peers = PeerBook(self.peer_id)
        for address in bootstrap:
            self.peers.configure(info_from_p2p_addr(multiaddr.Multiaddr(address)))
        # with credentials, peers are exchanged (admitted peers only)
        self.exchanges = None if credentials is None else PeerExchanges(
            credentials, self.peers, lambda peer: self._open(peer, PEERS_PROTOCOL), self.connected_peers,
            self._known_addresses)
        self._mdns = mdns
        self.validator = validator  # set by the member: its intake screens gossip (counted refusals)
        self.status_validator = None  # set by a status board: a bad status is neither kept nor forwarded
        self._status_send, self._statuses = trio.open_memory_channel[bytes](1000)
        self._gossip_send, self._gossip = trio.open_memory_channel[bytes](10_000)
        self._conn_send, self._connections = trio.open_memory_channel[str](1000)
        self._handler: StreamHandler | None = None
        key_pair = create_new_key_pair(identity.seed)
        self.host = new_host(
            key_pair=key_pair,
            sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)},
            muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
            enable_mDNS=mdns,
        )
        # py-libp2p's auto-connector dials every peer its peerstore holds (mDNS puts each one
        # there) until it has 50 connections, every 10 s: our dial loop decides whom to
        # connect to (peer_book.py), so it never starts.
        self.host.get_network().auto_connector.start = _stay_stopped
        self._router = Router(
            protocols=GOSSIP_PROTOCOLS,
            degree=MESH_DEGREE, degree_low=MESH_DEGREE_LOW, degree_high=MESH_DEGREE_HIGH,
            heartbeat_interval=1, heartbeat_initial_delay=0.1, time_to_live=30,
            gossip_window=3, gossip_history=5,
            adaptive_gossip_enabled=False, spam_protection_enabled=False,
        )
        # py-libp2p caches a validation verdict by message id for its validation TTL; the id
        # must name the topic too, or the bytes of an honest status replayed on the events
        # topic (refused there) would make every receiver drop the real status as "known bad".
        # And a verdict must not outlive the seen-cache: a replay after it would skip the
        # validator and be forwarded.
        self._pubsub = GossipPubsub(self.host, self._router, msg_id_constructor=self._message_id,
                                    seen_ttl=SEEN_TTL_S, validation_cache_ttl=SEEN_TTL_S)
        self._known_connected: set[str] = set()
        self.half_open = HalfOpen()
        self._nursery: trio.Nursery | None = None  # for drops and peer-exchange asks; shared with the opener
        self._dropping: set[str] = set()
        self.liveness = Liveness(self._probe, self.connected_peers, self.drop)
        # ``drop`` looked up at each call, as before the opener was its own class (tests replace it)
        self._opener = StreamOpener(self.host, lambda peer: self.drop(peer), self.liveness.stalls.stalled_since,
                                    self.liveness.heard)

    def _message_id(self, message) -> bytes:
        """sha256 of the data on the events topic alone (PROTOCOL.md section 11); on any other
        topic, or several, sha256 of the topics, a zero byte and the data."""
        topics = sorted(message.topicIDs)
        if topics == [self.topic]:
            return hashlib.sha256(message.data).digest()
        return hashlib.sha256(",".join(topics).encode() + b"\0" + message.data).digest()

    # --- Network interface -------------------------------------------------

    @property
    def gossip(self) -> trio.MemoryReceiveChannel[bytes]:
        return self._gossip

    @property
    def connections(self) -> trio.MemoryReceiveChannel[str]:
        return self._connections

    def connected_peers(self) -> list[str]:
        return sorted(str(p) for p in self.host.get_connected_peers())

    def counters(self) -> dict[str, int]:
        return {"own_stalls": self.liveness.stalls.stalls, "liveness_kept": self.liveness.kept,
                "peers_learned": self.exchange["learned"], "peers_refused": self.exchange["refused"],
                "peers_forgotten": self.peers.forgotten, "peer_asks_too_soon": self.exchange["too_soon"],
                "gossip_half_open": self.half_open.mended}

    def gossip_state(self) -> dict[str, int]:
        """The events topic's mesh: its size, the peers subscribed, and those we back off from."""
        return self._router.mesh_state(self.topic)

    @property
    def exchange(self) -> dict[str, int]:
        """Peer-exchange counts: answered, learned, refused, too_soon (all 0 without credentials)."""
        return self.exchanges.counts if self.exchanges else {"answered": 0, "learned": 0, "refused": 0,
                                                             "too_soon": 0}

    def stalled_since(self, start: float) -> bool:
        return self.liveness.stalls.stalled_since(start)

    async def publish(self, data: bytes) -> None:
        await self._pubsub.publish(self.topic, data)

    async def publish_status(self, data: bytes) -> None:
        """Gossip a signed status message (``agents.status``) on the status topic."""
        await self._pubsub.publish(self.status_topic, data)

    @property
    def statuses(self) -> trio.MemoryReceiveChannel[bytes]:
        """Status messages gossiped by others, past ``status_validator``."""
        return self._statuses

    async def open_stream(self, peer: str) -> Libp2pStream:
        """Open a sync stream; StreamClosed when it cannot within ``DIAL_TIMEOUT``, and at once
        while an earlier open to ``peer`` that its caller gave up on has not returned."""
        return Libp2pStream(await self._open(peer, SYNC_PROTOCOL), peer)

    async def _open(self, peer: str, protocol: TProtocol):
        return await self._opener.open(peer, protocol)

    def drop(self, peer: str) -> None:
        """Close our connections to ``peer`` in the background (it is redialled as usual)."""
        if self._nursery is not None and peer not in self._dropping:
            self._dropping.add(peer)
            self._nursery.start_soon(self._close_peer, peer)

    async def _close_peer(self, peer: str) -> None:
        """Close politely for ``CLOSE_TIMEOUT``; then sever the sockets: a polite close writes
        under the connection's write lock, which a write stuck on a blackholed link holds."""
        try:
            peer_id = ID.from_base58(peer)
            with trio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Exception):  # already gone
                await self.host.get_network().close_peer(peer_id)
            for connection in self.host.get_network().get_connections(peer_id):
                sever(connection)
            self._known_connected.discard(peer)
        finally:
            self._dropping.discard(peer)

    def serve(self, handler: StreamHandler) -> None:
        self._handler = handler

    def addresses(self) -> list[str]:
        return [str(a) for a in self.host.get_addrs()]

    # --- running -----------------------------------------------------------

    async def _on_stream(self, stream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        self.liveness.heard(peer)
        wrapped = Libp2pStream(stream, peer)
        try:
            if self._handler is not None:
                await self._handler(wrapped)
        except Exception as exc:  # never into py-libp2p: it would end the connection, or the host
            log.error("sync stream handler failed", peer=peer, error=repr(exc)[:200])
        finally:
            await wrapped.aclose()

    def _validate(self, forwarder: ID, message) -> bool:
        self.liveness.heard(str(forwarder))
        return self.validator is None or bool(self.validator(message.data))

    def _validate_status(self, forwarder: ID, message) -> bool:
        self.liveness.heard(str(forwarder))
        return self.status_validator is None or bool(self.status_validator(message.data))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self._mdns:
            # before the host starts: it starts mDNS itself, and a peer found before we
            # listen would be announced to nobody (mDNS does not announce known peers again)
            self._listen_for_mdns()
        async with (
            self.host.run(self._listen),
            trio.open_nursery() as nursery,
            background_trio_service(self._pubsub),
            background_trio_service(self._router),
        ):
            self._nursery = self._opener.nursery = nursery
            await self._pubsub.wait_until_ready()
            self._pubsub.set_topic_validator(self.topic, self._validate, False)
            subscription = await self._pubsub.subscribe(self.topic)
            self._pubsub.set_topic_validator(self.status_topic, self._validate_status, False)
            statuses = await self._pubsub.subscribe(self.status_topic)
            self.host.set_stream_handler(SYNC_PROTOCOL, self._on_stream)
            if self.exchanges is not None:
                self.host.set_stream_handler(PEERS_PROTOCOL, self.exchanges.answer)
            nursery.start_soon(self._drain, subscription, self._gossip_send)
            nursery.start_soon(self._drain, statuses, self._status_send)
            nursery.start_soon(self._dial_loop)
            nursery.start_soon(self.liveness.run, nursery)
            log.info("listening", peer=self.peer_id, addrs=self.addresses(), topic=self.topic)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = self._opener.nursery = None

    async def _drain(self, subscription, into: trio.MemorySendChannel[bytes]) -> None:
        while True:
            message = await subscription.get()
            if ID(message.from_id) == self.host.get_id():
                continue
            try:
                into.send_nowait(message.data)
            except trio.WouldBlock:  # events: sync fetches them; statuses: the next one comes in seconds
                log.warning("gossip queue full; dropping", topic=message.topicIDs[0] if message.topicIDs else "")

    def _listen_for_mdns(self) -> None:
        from libp2p.discovery.events.peerDiscovery import peerDiscovery

        token = trio.lowlevel.current_trio_token()

        def discovered(info: PeerInfo) -> None:  # zeroconf's thread
            def add() -> None:
                if str(info.peer_id) != self.peer_id and str(info.peer_id) not in self.peers:
                    log.info("discovered by mdns", peer=str(info.peer_id))
                    self.peers.discover(info)
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(add)

        peerDiscovery.register_peer_discovered_handler(discovered)

    def _counted(self, connected: set[str]) -> set[str]:
        """The connections the bound counts: not those whose ticket a peer exchange refused
        (a stranger's connections must not stop a member from dialling its cluster)."""
        return connected - self.exchanges.strangers if self.exchanges else connected

    async def _dial_loop(self) -> None:
        last_probe = last_mesh_log = trio.current_time()
        while True:
            if trio.current_time() - last_mesh_log >= MESH_LOG_INTERVAL:
                last_mesh_log = trio.current_time()
                log.debug("gossip mesh", **self.gossip_state())
            connected = set(self.connected_peers())
            self._hear_connections()
            for peer in connected - self._known_connected:
                self._conn_send.send_nowait(peer)
                self._ask_soon(peer)
            self._known_connected = connected
            now = trio.current_time()
            self._drop_half_open(now, connected)
            if self.exchanges is not None:
                self.exchanges.keep_to(connected, now)
            wanted = self.peers.to_dial(self._counted(connected), now)
            if not wanted and now - last_probe > EXCHANGE_INTERVAL:
                last_probe = now
                probe = self.peers.probe(self._counted(connected), now)
                wanted = [probe] if probe is not None else []
            async with trio.open_nursery() as dials:  # side by side: a dead peer costs one timeout, not a turn each
                for info in wanted:
                    dials.start_soon(self._dial, info)
            if self.exchanges is not None:
                # now and then ask a connected peer again (the oldest asked): peers come and go
                again = self.exchanges.due(connected, trio.current_time())
                if again is not None:
                    self._ask_soon(again)
            await trio.sleep(DIAL_INTERVAL)

    def _drop_half_open(self, now: float, connected: set[str]) -> None:
        """Drop the connections of peers we hold a gossip stream to but whose subscriptions
        we lost (``half_open.py``): both ends start pubsub afresh on the next connection."""
        subscribed = {str(p) for p in self._pubsub.peer_topics.get(self.topic, ())}
        writable = [peer for peer in map(str, self._pubsub.peers) if peer in connected]
        for peer in self.half_open.due(now, writable, subscribed):
            log.info("gossip half open: its subscriptions unknown while we hold a stream to it; reconnecting",
                     peer=peer, after_s=self.half_open.after)
            self.drop(peer)

    def _hear_connections(self) -> None:
        """Every frame read on a connection counts as hearing from its peer (``hear_frames``):
        a peer whose frames keep coming is never probed, let alone dropped, however slowly a
        starved machine answers probes. A connection is hooked within ``DIAL_INTERVAL``."""
        for peer_id, connections in self.host.get_network().get_connections_map().items():
            for connection in connections:
                if not heard_through(connection):  # the peer's id spelled out only for a new one
                    hear_frames(connection, functools.partial(self.liveness.heard, str(peer_id)))

    async def _probe(self, peer: str) -> None:
        """A liveness probe (``liveness.py``): a yamux ping on each connection to ``peer``. Its
        muxer answers with an ACK frame, heard like any frame read (each connection is hooked
        here if the dial loop has not done it yet). StreamClosed when none could be sent."""
        sent = 0
        for connection in self.host.get_network().get_connections(ID.from_base58(peer)):
            hear_frames(connection, functools.partial(self.liveness.heard, peer))
            with contextlib.suppress(StreamClosed):  # another connection may still carry it
                sent += await muxer_ping(connection)
        if not sent:
            raise StreamClosed(f"no connection to {peer[-8:]} took a ping")

    async def _dial(self, info: PeerInfo) -> None:
        peer = str(info.peer_id)
        self.host.get_network().unblock_peer(info.peer_id)
        try:
            with trio.fail_after(DIAL_TIMEOUT):
                await self.host.connect(await resolved(info))
        except Exception as exc:  # a failed dial is routine: retried after its backoff
            log.debug("dial failed", peer=peer, error=repr(exc)[:120])
            self.peers.dialled(peer, ok=False, now=trio.current_time())
            return
        self.peers.dialled(peer, ok=True)
        log.info("connected", peer=peer)
        if peer not in self._known_connected:
            self._known_connected.add(peer)
            self._conn_send.send_nowait(peer)
            self._ask_soon(peer)

    # --- peer exchange (peer_exchange.py) ------------------------------------

    def _ask_soon(self, peer: str) -> None:
        if self.exchanges is not None and self._nursery is not None:
            self.exchanges.ask_soon(self._nursery, peer)

    def _known_addresses(self, peer: str) -> list[str]:
        """Where ``peer`` listens, as far as we know (nothing before its signed record came)."""
        peer_id = ID.from_base58(peer)
        observed = [a for c in self.host.get_network().get_connections(peer_id) for a in c.get_transport_addresses()]
        try:
            declared = self.host.get_peerstore().addrs(peer_id)
        except PeerStoreError:
            return []
        return listed_addresses(declared, observed)

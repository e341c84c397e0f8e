"""The libp2p adapter's stream opener, against a py-libp2p that will not be cancelled.

py-libp2p resets a failed ``new_stream`` in a shielded scope with no deadline; when that
reset waits on a wedged connection, a caller that awaited it stopped for good (every
member's sync loop, after a partition). Each open must return by its own deadline whatever
py-libp2p does; an open left behind makes the next one to that peer wait for it and then
fail, and one left behind too long has the peer's connections dropped.
"""

from __future__ import annotations

import contextlib

import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from agents.net import liveness, opening, p2p
from agents.net.base import StreamClosed
from tests.builders import identity


async def test_an_open_that_py_libp2p_shields_from_cancellation_returns_at_the_deadline() -> None:
    network = p2p.Libp2pNetwork(identity("opener"), "streams", listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    release = trio.Event()
    calls = 0

    async def wedged_new_stream(peer_id, protocols):
        nonlocal calls
        calls += 1
        with trio.CancelScope(shield=True):  # as py-libp2p's cleanup after a failed open
            await release.wait()
        raise OSError("released")

    network.host.new_stream = wedged_new_stream  # type: ignore[method-assign]
    dropped: list[str] = []
    network.drop = dropped.append  # type: ignore[method-assign]
    peer = identity("wedged").peer_id
    answers: list[tuple[float, str]] = []

    async def open_once() -> None:
        started = trio.current_time()
        try:
            await network.open_stream(peer)
            answers.append((trio.current_time() - started, "a stream"))
        except StreamClosed as exc:
            answers.append((trio.current_time() - started, str(exc)))

    async with trio.open_nursery() as nursery:
        await nursery.start(network.run)
        try:
            for _ in range(3):  # each in a task of its own: on a broken opener the test fails, not hangs
                nursery.start_soon(open_once)
                await trio.sleep(opening.DIAL_TIMEOUT + 1)
        finally:
            release.set()  # the abandoned open ends
        with trio.fail_after(5):
            while len(answers) < 3:
                await trio.sleep(0.05)
        (first_s, first), (second_s, second), (_, third) = answers
        assert "none opened in" in first and first_s < opening.DIAL_TIMEOUT + 1, answers
        # the next two wait for the abandoned open, then give up: no new open is piled on
        assert "an earlier open has not returned" in second and second_s < opening.DIAL_TIMEOUT + 1, answers
        assert "an earlier open has not returned" in third, answers
        assert calls == 1, calls
        assert dropped == [peer], "an open left behind past twice the deadline did not drop the peer"
        await open_once()  # the abandoned open has returned: the peer is tried again
        assert "released" in answers[-1][1] and calls == 2, answers
        nursery.cancel_scope.cancel()


async def _connected_to(nursery: trio.Nursery, listener: p2p.Libp2pNetwork) -> p2p.Libp2pNetwork:
    """Start ``listener`` and a second network that dials it; return the second once connected."""
    await nursery.start(listener.run)
    address = f"{listener.addresses()[0]}/p2p/{listener.peer_id}"
    dialler = p2p.Libp2pNetwork(identity("dialler"), listener.cluster, listen=["/ip4/127.0.0.1/tcp/0"],
                                bootstrap=[address], mdns=False)
    await nursery.start(dialler.run)
    with trio.fail_after(30):
        while dialler.peer_id not in listener.connected_peers():
            await trio.sleep(0.1)
    return dialler


async def test_every_frame_a_peer_sends_counts_as_hearing_from_it() -> None:
    """Liveness pings a peer only when nothing came from it lately; a ping is a stream both ends
    negotiate. Every muxer frame is such evidence, and free: here the only frames are a stream
    opened for a protocol nobody serves (no handler runs, no gossip is validated), and they
    are heard; a starved cluster dropped live peers whose frames kept coming."""
    listener = p2p.Libp2pNetwork(identity("listener"), "frames", listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    async with trio.open_nursery() as nursery:
        dialler = await _connected_to(nursery, listener)
        await trio.sleep(p2p.DIAL_INTERVAL + 0.5)  # the listener's dial loop has hooked the connection
        listener.liveness._heard.clear()
        before = trio.current_time()
        with contextlib.suppress(Exception):  # refused: the listener serves no such protocol
            await dialler.host.new_stream(ID.from_base58(listener.peer_id), [TProtocol("/nobody/1.0.0")])
        assert listener.liveness._heard.get(dialler.peer_id, float("-inf")) >= before
        nursery.cancel_scope.cancel()


async def test_a_liveness_probe_is_a_yamux_ping_its_peer_answers_with_a_frame_and_no_stream() -> None:
    """A probe is one yamux ping frame: the peer's muxer answers with an ACK, which is heard, and
    no stream opens at either end (a ping stream cost both ends a negotiation: a third of fifty
    idle members' CPU). Once the connection is gone, a probe fails at once, as before."""
    listener = p2p.Libp2pNetwork(identity("listener"), "probes", listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    async with trio.open_nursery() as nursery:
        dialler = await _connected_to(nursery, listener)
        opened: list[object] = []
        dialler.host.new_stream = lambda *args: opened.append(args)  # type: ignore[method-assign,assignment]
        acks: list[bytes] = []
        for connection in listener.host.get_network().get_connections(ID.from_base58(dialler.peer_id)):
            muxer = connection.muxed_conn
            write = muxer._write_frame

            async def counted(frame: bytes, write=write) -> None:
                if frame[1] == 0x2 and frame[2:4] == b"\0\2":  # yamux: type 2 (ping), flags ACK
                    acks.append(frame)
                await write(frame)
            muxer._write_frame = counted
        for _ in range(3):
            dialler.liveness._heard.clear()
            sent = trio.current_time()
            with trio.fail_after(2):
                assert await dialler.liveness._ping(listener.peer_id, timeout=2)
            assert dialler.liveness._heard[listener.peer_id] >= sent
        assert opened == [], "a probe opened a stream"
        assert len(acks) >= 3, "the listener's muxer did not answer the probes"
        for connection in dialler.host.get_network().get_connections(ID.from_base58(listener.peer_id)):
            await connection.close()
        started = trio.current_time()
        assert not await dialler.liveness._ping(listener.peer_id, timeout=5)
        assert trio.current_time() - started < 1, "a probe with no connection waited for its deadline"
        nursery.cancel_scope.cancel()


@pytest.mark.slow
async def test_a_peer_whose_link_delivers_nothing_is_dropped_after_two_unanswered_probes() -> None:
    """A blackholed link closes nothing: here every frame the listener writes to the dialler
    vanishes, so its muxer's answers to the dialler's probes never arrive, and nothing else
    does either. The dialler drops it within two probes of falling quiet (the first given at
    least ``PING_TIMEOUT``, the second twice that), and not before both are out."""
    listener = p2p.Libp2pNetwork(identity("listener"), "blackhole", listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    async with trio.open_nursery() as nursery:
        dialler = await _connected_to(nursery, listener)
        dropped: list[tuple[float, str]] = []
        dialler.liveness._drop = lambda peer: dropped.append((trio.current_time(), peer))
        for connection in listener.host.get_network().get_connections(ID.from_base58(dialler.peer_id)):

            async def vanish(frame: bytes) -> None:
                pass
            connection.muxed_conn._write_frame = vanish
        cut = trio.current_time()
        with trio.fail_after(liveness.QUIET_BEFORE_PING + 2 * liveness.PING_INTERVAL + 3 * liveness.MAX_PING_TIMEOUT):
            while not dropped:
                await trio.sleep(0.2)
        (at, peer), = dropped
        assert peer == listener.peer_id
        assert at - cut >= 3 * liveness.PING_TIMEOUT, "dropped before two probes had their time"
        nursery.cancel_scope.cancel()


async def test_a_reader_gives_the_sender_credit_half_a_window_at_a_time_not_per_read() -> None:
    """py-libp2p's yamux sent a WINDOW_UPDATE frame for every read, by default: one more frame
    encrypted, sent, received and decrypted for each small message. Two hundred small frames
    now cost no update at all (half a window is 128 KiB), and all arrive (``yamux_credit``);
    a frame of four windows still flows, credited as it is read."""
    listener = p2p.Libp2pNetwork(identity("listener"), "credit", listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    received: list[bytes] = []

    async def handler(stream) -> None:
        while len(received) < 201:
            received.append(await stream.receive())

    listener.serve(handler)
    async with trio.open_nursery() as nursery:
        dialler = await _connected_to(nursery, listener)
        updates: list[bytes] = []
        for connection in listener.host.get_network().get_connections(ID.from_base58(dialler.peer_id)):
            muxer = connection.muxed_conn
            write = muxer._write_frame

            async def counted(frame: bytes, write=write) -> None:
                # yamux header: version, type (1: window update), flags (SYN, ACK, FIN, RST:
                # a stream opening or closing; none for a bare credit), stream id, increment
                if frame[1] == 0x1 and frame[2:4] == b"\0\0":
                    updates.append(frame)
                await write(frame)
            muxer._write_frame = counted
        stream = await dialler.open_stream(listener.peer_id)
        for i in range(200):
            await stream.send(b"m" * 100 + str(i).encode())
        with trio.fail_after(30):
            while len(received) < 200:
                await trio.sleep(0.05)
        assert received[-1] == b"m" * 100 + b"199"
        assert updates == [], f"{len(updates)} window updates for 200 small frames"
        await stream.send(big := bytes(range(256)) * 4096)  # 1 MiB: four windows, credited as read
        with trio.fail_after(30):
            while len(received) < 201:
                await trio.sleep(0.05)
        assert received[-1] == big and updates, "a frame larger than the window came without credit"
        nursery.cancel_scope.cancel()

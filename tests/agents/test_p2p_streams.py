"""The libp2p adapter's sync-stream opener, against a py-libp2p that will not be cancelled.

py-libp2p resets a failed ``new_stream`` in a shielded scope with no deadline; when that
reset waits on a wedged connection, a caller that awaited it stopped for good (every
member's sync loop, after a partition). ``open_stream`` must return by its own deadline
whatever py-libp2p does, and never pile a second open onto a peer whose first has not
returned.
"""

from __future__ import annotations

import trio

from agents.net import p2p
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
    peer = identity("wedged").peer_id
    async with trio.open_nursery() as nursery:
        await nursery.start(network.run)
        started = trio.current_time()
        try:
            await network.open_stream(peer)
            raise AssertionError("an open that never completes returned a stream")
        except StreamClosed as exc:
            waited = trio.current_time() - started
            assert "no stream in" in str(exc), exc
        assert p2p.DIAL_TIMEOUT <= waited < p2p.DIAL_TIMEOUT + 2, waited
        try:
            await network.open_stream(peer)
            raise AssertionError("a second open to the wedged peer was started")
        except StreamClosed as exc:
            assert "an earlier open has not returned" in str(exc), exc
        assert calls == 1
        release.set()  # the abandoned open ends; the peer may be tried again
        with trio.fail_after(5):
            while peer in network._opening:
                await trio.sleep(0.05)
        try:
            await network.open_stream(peer)
            raise AssertionError("an open that fails returned a stream")
        except StreamClosed as exc:
            assert "released" in str(exc), exc
        assert calls == 2
        nursery.cancel_scope.cancel()

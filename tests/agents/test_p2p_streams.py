"""The libp2p adapter's stream opener, against a py-libp2p that will not be cancelled.

py-libp2p resets a failed ``new_stream`` in a shielded scope with no deadline; when that
reset waits on a wedged connection, a caller that awaited it stopped for good (every
member's sync loop, after a partition). Each open must return by its own deadline whatever
py-libp2p does; an open left behind makes the next one to that peer wait for it and then
fail, and one left behind too long has the peer's connections dropped.
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
                await trio.sleep(p2p.DIAL_TIMEOUT + 1)
        finally:
            release.set()  # the abandoned open ends
        with trio.fail_after(5):
            while len(answers) < 3:
                await trio.sleep(0.05)
        (first_s, first), (second_s, second), (_, third) = answers
        assert "none opened in" in first and first_s < p2p.DIAL_TIMEOUT + 1, answers
        # the next two wait for the abandoned open, then give up: no new open is piled on
        assert "an earlier open has not returned" in second and second_s < p2p.DIAL_TIMEOUT + 1, answers
        assert "an earlier open has not returned" in third, answers
        assert calls == 1, calls
        assert dropped == [peer], "an open left behind past twice the deadline did not drop the peer"
        await open_once()  # the abandoned open has returned: the peer is tried again
        assert "released" in answers[-1][1] and calls == 2, answers
        nursery.cancel_scope.cancel()

"""Liveness drops a peer only on evidence that its link delivers nothing; StallWatch tells this
process's own stalls from a peer's silence (a mock clock stands in for a SIGSTOP: ``jump``
moves time on while no task runs, as a paused process sees on waking)."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from agents.net.base import StreamClosed
from agents.net.liveness import (
    MAX_PING_TIMEOUT,
    PING_FANOUT,
    PING_INTERVAL,
    PING_TIMEOUT,
    QUIET_BEFORE_PING,
    Liveness,
    RoundTrips,
)
from agents.net.stalls import SLACK, TICK, StallWatch


def test_running_normally_is_no_stall() -> None:
    async def main() -> None:
        watch = StallWatch()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            start = trio.current_time()
            await trio.sleep(30)
            assert not watch.stalled_since(start) and watch.stalls == 0
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_stall_is_seen_on_waking_before_and_after_the_watch_runs() -> None:
    clock = trio.testing.MockClock()

    async def main() -> None:
        watch = StallWatch()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            clock.jump(7.0)  # seven seconds in which nothing ran
            # a caller whose deadline passed during the stall may run before the watch does
            assert watch.stalled_since(start)
            clock.jump(TICK)
            await trio.testing.wait_all_tasks_blocked()  # the watch wakes and records it
            assert watch.stalls == 1 and watch.stalled_since(start)
            # a later deadline, begun after the stall, is judged on its own
            later = trio.current_time()
            for _ in range(8):
                clock.jump(TICK)
                await trio.testing.wait_all_tasks_blocked()
            assert not watch.stalled_since(later) and watch.stalls == 1
            # a delay inside the slack is scheduling noise, not a stall
            clock.jump(TICK + SLACK / 2)
            await trio.testing.wait_all_tasks_blocked()
            assert not watch.stalled_since(later) and watch.stalls == 1
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)


REFUSED = -1.0


class Probes:
    """Fake probes: ``delay(peer)`` says how long the peer's answer takes to be heard (None: a
    blackholed link, never; ``REFUSED``: the probe cannot be sent, the connection is gone)."""

    def __init__(self, delay: Callable[[str], float | None]) -> None:
        self.delay = delay
        self.liveness: Liveness | None = None
        self.sent: list[tuple[float, str]] = []

    def make(self, connected: Callable[[], list[str]], drop: Callable[[str], None]) -> Liveness:
        self.liveness = Liveness(self.probe, connected, drop)
        return self.liveness

    async def probe(self, peer: str) -> None:
        delay = self.delay(peer)
        if delay == REFUSED:
            raise StreamClosed("refused")
        self.sent.append((trio.current_time(), peer))
        if delay is not None:
            await trio.sleep(delay)  # what carries the answer, and the answer's frame, take this long
            assert self.liveness is not None
            self.liveness.heard(peer)


def run_checks(seconds: float, *, heard_every: float | None = None, refuse: bool = False,
               probes: list[int] | None = None) -> list[str]:
    """Check one silent peer for ``seconds``; hear from it every ``heard_every`` s if given;
    ``refuse``: its probes fail at once. The peers dropped, in order; ``probes`` gets how many
    probes were sent."""
    dropped: list[str] = []
    fake = Probes(lambda peer: REFUSED if refuse else None)

    async def main() -> None:
        liveness = fake.make(lambda: ["peer"], dropped.append)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(liveness.run, nursery)
            if heard_every is not None:
                async def talk() -> None:
                    while True:
                        liveness.heard("peer")
                        await trio.sleep(heard_every)
                nursery.start_soon(talk)
            await trio.sleep(seconds)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    if probes is not None:
        probes.append(len(fake.sent))
    return dropped


def test_a_silent_peer_is_dropped_after_two_missed_pings_the_second_given_twice_the_time() -> None:
    assert run_checks(PING_INTERVAL + 3 * PING_TIMEOUT - 0.5) == []  # one miss is not enough
    assert run_checks(PING_INTERVAL + 3 * PING_TIMEOUT + 0.5) == ["peer"]
    assert run_checks(PING_INTERVAL + 1, refuse=True) == ["peer"]  # opens refused at once: closed at once


def test_the_ping_deadline_follows_the_answers_within_its_bounds() -> None:
    trips = RoundTrips()
    assert trips.timeout() == PING_TIMEOUT and trips.timeout(1) == 2 * PING_TIMEOUT  # no answer yet
    for _ in range(20):
        trips.answered(0.01)
    assert trips.timeout() == PING_TIMEOUT  # a fast machine: the least deadline, not 40 ms
    for _ in range(20):
        trips.answered(6.0)  # a starved one
    assert 6.0 < trips.timeout() < 9.0 and trips.timeout(1) == 2 * trips.timeout()
    trips.answered(9.0)  # the variation widens the deadline before the mean catches up
    assert trips.timeout() > 9.0
    for _ in range(20):
        trips.answered(100.0)
    assert trips.timeout() == trips.timeout(1) == MAX_PING_TIMEOUT


def test_live_peers_slower_to_answer_than_the_least_deadline_are_kept_and_a_silent_one_still_goes() -> None:
    """Eight peers that answer every ping 1.5x ``PING_TIMEOUT`` late (thirty members on two cores
    answered in seconds): a fixed deadline dropped them all, over and over. The ninth goes
    silent: it is still dropped, within the deadline's bound."""
    peers = [f"peer-{i}" for i in range(8)]
    dropped: list[tuple[float, str]] = []
    silent_from = 120.0

    fake = Probes(lambda peer: None if peer == "silent" and trio.current_time() >= silent_from
                  else 1.5 * PING_TIMEOUT)

    async def main() -> None:
        liveness = fake.make(lambda: [*peers, "silent"], lambda peer: dropped.append((trio.current_time(), peer)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(liveness.run, nursery)
            await trio.sleep(silent_from + QUIET_BEFORE_PING + 2 * MAX_PING_TIMEOUT + 20)
            assert all(liveness.round_trips[peer].timeout() > 1.5 * PING_TIMEOUT for peer in peers)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert dropped and {peer for _, peer in dropped} == {"silent"}, dropped  # (this test never disconnects it)


def test_one_slow_peer_does_not_stretch_the_deadline_of_another() -> None:
    """Deadlines are per peer: a peer that always answers late (here 1.75x ``PING_TIMEOUT``)
    earns long deadlines for itself only; a fast one that goes silent still goes after its
    own two short pings."""
    dropped: list[tuple[float, str]] = []
    silent_from = 90.0

    fake = Probes(lambda peer: 1.75 * PING_TIMEOUT if peer == "slow"
                  else None if trio.current_time() >= silent_from else 0.01)

    async def main() -> None:
        liveness = fake.make(lambda: ["slow", "fast"], lambda peer: dropped.append((trio.current_time(), peer)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(liveness.run, nursery)
            await trio.sleep(silent_from + QUIET_BEFORE_PING + 2 * PING_INTERVAL + 3 * PING_TIMEOUT + 1)
            assert liveness.round_trips["slow"].timeout() > 2 * PING_TIMEOUT
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [peer for _, peer in dropped] == ["fast"], dropped


def test_a_peer_heard_from_is_kept_though_its_probes_go_unanswered() -> None:
    """Slow to answer probes (catching up after a stall) while its gossip and streams still
    arrive: anything heard after a probe went out answers it."""
    probes: list[int] = []
    # quiet long enough to be probed, heard again before the probes' deadlines: kept
    assert run_checks(90, heard_every=QUIET_BEFORE_PING + PING_TIMEOUT, probes=probes) == []
    assert probes[0] >= 1, "the peer was never probed: the rule under test did not run"
    # heard too seldom: no proof it is there
    assert run_checks(90, heard_every=QUIET_BEFORE_PING + 5 * PING_TIMEOUT) != []
    # heard often enough: never probed
    quiet: list[int] = []
    assert run_checks(90, heard_every=QUIET_BEFORE_PING - 1, probes=quiet) == []
    assert quiet == [0], "a peer heard from within QUIET_BEFORE_PING was probed"


def test_pings_missed_across_our_own_stall_are_not_counted() -> None:
    clock = trio.testing.MockClock()
    dropped: list[str] = []
    opened: list[float] = []

    async def probe(peer: str) -> None:  # a blackholed link: sent, never answered
        opened.append(trio.current_time())

    async def advance(seconds: float) -> None:  # time passing with this process running
        for _ in range(round(seconds / 0.1)):
            clock.jump(0.1)
            await trio.testing.wait_all_tasks_blocked()

    async def main() -> None:
        liveness = Liveness(probe, lambda: ["peer"], dropped.append)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(liveness.run, nursery)
            while not opened:  # the first ping is out, unanswered
                await advance(0.1)
            await advance(PING_TIMEOUT - 1)  # its deadline nears ...
            clock.jump(7.0)  # ... and passes while this process is stopped
            await trio.testing.wait_all_tasks_blocked()
            assert liveness.stalls.stalls == 1
            # counted, that miss and the next would drop the peer one ping timeout after waking
            await advance(PING_TIMEOUT + 0.5)
            assert dropped == []
            await advance(3 * PING_TIMEOUT + PING_INTERVAL)  # two misses of its own, and it goes
            assert dropped == ["peer"]
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)


def test_a_member_checks_a_few_peers_an_interval_and_none_it_hears_from() -> None:
    """Twenty peers that answer every ping, one of them also heard from all the time: at most
    ``PING_FANOUT`` pings an interval (not twenty), every quiet peer pinged within one turn,
    and the talkative one never."""
    peers = [f"peer-{i:02}" for i in range(20)]
    fake = Probes(lambda peer: 0.01)

    async def main() -> None:
        liveness = fake.make(lambda: peers, lambda peer: None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(liveness.run, nursery)

            async def talk() -> None:
                while True:
                    liveness.heard("peer-07")
                    await trio.sleep(PING_INTERVAL / 2)
            nursery.start_soon(talk)
            await trio.sleep(20 * PING_INTERVAL + 0.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    per_interval: dict[int, int] = {}
    for at, _ in fake.sent:
        per_interval[int(at // PING_INTERVAL)] = per_interval.get(int(at // PING_INTERVAL), 0) + 1
    assert max(per_interval.values()) <= PING_FANOUT, per_interval
    turn = -(-(len(peers) - 1) // PING_FANOUT)
    assert {peer for at, peer in fake.sent if at <= (turn + 1) * PING_INTERVAL} == set(peers) - {"peer-07"}
    assert "peer-07" not in {peer for _, peer in fake.sent}

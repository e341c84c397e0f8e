"""A goal is on a member's disk before the member says it holds it: before the summary it
serves a client lists it (``swarm submit`` reads a goal listed there as held, and leaves; a
member's pull reads no promise there and waits for no disk), not at the goal's receipt,
whose commit waits for no fsync on the event loop (``Member.goals_on_disk``). The
simulation's store keeps its files as of its last fsync, what a power cut leaves (``tests.agents.test_member_disk.on_disk_after_a_power_cut``). How the
checkers judge it across simulated power cuts: ``tests/chaos/test_durability.py`` and the
planted page-cache goal in ``tests/chaos/test_planted_bugs.py``.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agents.core.sync import EventIndex, Summary
from agents.member import Member
from agents.net.base import StreamClosed
from agents.store import DiskFailed
from agents.syncproto import peek
from chaos.sim.network import SimFabric, SimNetwork
from chaos.sim.slot import SimStore
from tests.agents.test_member_disk import on_disk_after_a_power_cut
from tests.agents.test_rounds import Board
from tests.builders import Feed, credentials, goal


@pytest.mark.parametrize(("role", "promised"), [("client", True), ("scorer", False)])
def test_a_summary_served_to_a_client_lists_a_goal_only_once_it_is_on_the_disk(tmp_path: Path, role: str,
                                                                               promised: bool) -> None:
    """``swarm submit``'s question, asked over the simulated network of a member that got the
    goal by gossip (a commit that waited for no fsync): the summary it serves a client, which
    reads the goal listed as held and leaves, comes only once the goal is on the disk. A
    member's pull reads no promise there: its summary waits for no disk, and lists the goal
    still in page caches only."""
    board = Board(tag="ackgoal")
    store = SimStore.open(tmp_path / "member")
    seen: dict[str, object] = {}
    started: list[Member] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, asker = await _member_and_asker(nursery, store, "ackgoal", role=role)
            started.append(member)
            member._admit([board.goal], "gossip")
            seen["before"] = on_disk_after_a_power_cut(store, tmp_path / "cut0")
            seen["listed"] = (await _asks(asker, member, "ackgoal", role=role)).authors[board.goal.author].prefix_id
            seen["after"] = on_disk_after_a_power_cut(store, tmp_path / "cut1")
            nursery.cancel_scope.cancel()

    with _closed(started, store):
        trio.run(main)  # the real clock: a mock one would jump past every deadline while the fsync's thread runs
    assert seen["before"] == set(), "the goal's commit waited for the disk on the event loop"
    assert seen["listed"] == board.goal.id
    if promised:
        assert seen["after"] == {board.goal.id}, "a summary listed the goal to a client before it was on the disk"
    else:
        assert seen["after"] == set(), "a summary served to a member waited for the goal's fsync"


@contextlib.contextmanager
def _closed(started: list[Member], store: SimStore) -> Iterator[None]:
    """The members a test started on ``store``, and the store, closed however the test ends."""
    try:
        yield
    finally:
        for member in started:
            member.close()
        store.close()


async def _member_and_asker(nursery: trio.Nursery, store: SimStore, tag: str,
                            role: str = "client") -> tuple[Member, SimNetwork]:
    """An observer on ``store``, running, and an endpoint beside it that asks as ``swarm
    submit`` does (``_asks``), both up on one simulated network."""
    fabric = SimFabric(random.Random(0), nursery)
    me = credentials(f"{tag}/x", "observer")
    network = SimNetwork(fabric, me.identity.peer_id)
    member = Member(me, store, network, think_in_thread=False, now_ms=lambda: 10_000)
    network.attach(nursery)
    await nursery.start(member.run)
    asker = fabric.endpoint(credentials(f"{tag}/asker", role).identity.peer_id)
    fabric.bring_up(network)
    fabric.bring_up(asker)
    return member, asker


async def _asks(asker: SimNetwork, member: Member, tag: str, role: str = "client") -> Summary:
    stream = await asker.open_stream(member.me.peer_id)
    _role, summary = await peek(stream, EventIndex(), credentials(f"{tag}/asker", role))
    return summary


def test_a_goal_stored_while_a_summary_waits_for_the_disk_waits_with_it(tmp_path: Path) -> None:
    """A second goal comes by gossip while the fsync a summary waits for runs (held up here):
    the event loop stores it meanwhile (the fsync runs on a thread, outside the store's lock),
    and the summary, which lists it, waits for a second fsync that covers it."""
    client, scorer = Feed("race/client", "client"), Feed("race/s", "scorer").peer_id
    first = client.at(1000, goal("Plan a day in Kyoto", [scorer], 1))
    second = client.at(1001, goal("Plan a day in Nara", [scorer], 1))
    store = SimStore.open(tmp_path / "member")
    entered, release = threading.Event(), threading.Event()
    fsync_log = store._fsync_log

    def held_up(commits: int | None = None) -> None:
        if not release.is_set():
            entered.set()
            if not release.wait(30):
                seen["timed out"] = True  # the event loop never came to release it: it waited on the store
        fsync_log(commits)

    seen: dict[str, object] = {}
    started: list[Member] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, asker = await _member_and_asker(nursery, store, "race")
            started.append(member)
            store._fsync_log = held_up  # type: ignore[method-assign]  # (its start's own fsync done)
            member._admit([first], "gossip")

            async def ask() -> None:
                seen["listed"] = (await _asks(asker, member, "race")).authors[client.peer_id].prefix_id
                seen["after"] = on_disk_after_a_power_cut(store, tmp_path / "cut")

            async with trio.open_nursery() as asking:
                asking.start_soon(ask)
                assert await trio.to_thread.run_sync(entered.wait, 30)  # the summary's fsync is running
                member._admit([second], "gossip")
                seen["stored"] = second.id in member.index
                release.set()
            nursery.cancel_scope.cancel()

    with _closed(started, store):
        trio.run(main)
    assert "timed out" not in seen, "storing the second goal waited for the fsync"
    assert seen["stored"] and seen["listed"] == second.id
    assert seen["after"] == {first.id, second.id}, "a summary listed a goal stored during its fsync, not on the disk"


def test_a_member_whose_disk_fails_the_fsync_a_summary_waits_for_stops(tmp_path: Path) -> None:
    """The fsync before a served summary fails: the asker gets no summary, and the member
    stops with the store's error (the network's handler, which runs the serve, would keep the
    error to itself)."""
    board = Board(tag="ackfail")
    store = SimStore.open(tmp_path / "member")
    seen: dict[str, object] = {}
    started: list[Member] = []

    async def main() -> None:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                member, asker = await _member_and_asker(nursery, store, "ackfail")
                started.append(member)
                member._admit([board.goal], "gossip")
                store.failing = True
                try:
                    await _asks(asker, member, "ackfail")
                except StreamClosed:
                    seen["answered"] = False
                await trio.sleep_forever()  # until the member's failure ends the nursery

    with _closed(started, store), pytest.raises(BaseExceptionGroup) as ended:
        trio.run(main)
    assert seen == {"answered": False}
    assert ended.group_contains(DiskFailed, match="cannot flush"), ended.value

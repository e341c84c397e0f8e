"""Fault windows and member lanes from a fault log (what report.html and the live page show)."""

from __future__ import annotations

from chaos.history import History, MemberHistory
from chaos.windows import fault_windows, in_force, member_states


def _history(*faults: tuple[float, str, str], late: str = "") -> History:
    history = History(scenario="t", seed=0, shape={}, quorum=2)
    for name in ("scorer-1", "scorer-2", "scorer-3", "executor-1"):
        history.members[name] = MemberHistory(name, name.split("-")[0], f"peer-{name}", late=name == late)
    for at, kind, detail in faults:
        history.fault(at, kind, detail)
    history.ended_at = 30.0
    return history


def test_a_cut_lasts_until_the_heal_or_the_next_cut_and_names_its_minority() -> None:
    history = _history((2, "partition", "scorer-1 | scorer-2,scorer-3,executor-1"),
                       (5, "partition", "scorer-1,scorer-2 | scorer-3,executor-1,x-1"), (9, "heal", ""),
                       (12, "oneway", "scorer-1 -> scorer-2 lost"))
    windows = [(w.kind, w.start, w.end, w.members) for w in fault_windows(history)]
    assert windows == [("partition", 2, 5, ("scorer-1",)), ("partition", 5, 9, ("scorer-1", "scorer-2")),
                       ("oneway", 12, 30.0, ())]


def test_member_lanes_follow_kills_pauses_and_late_starts() -> None:
    history = _history((1, "kill", "scorer-2"), (4, "restart", "scorer-2 again"), (6, "pause", "scorer-3"),
                       (8, "unpause", "scorer-3"), (10, "start", "executor-1 (late)"), (11, "stop", "scorer-1"),
                       late="executor-1")
    states = member_states(history)
    assert states["scorer-2"] == [(0.0, 1, "up"), (1, 4, "down"), (4, 30.0, "up")]
    assert states["scorer-3"] == [(0.0, 6, "up"), (6, 8, "paused"), (8, 30.0, "up")]
    assert states["executor-1"] == [(0.0, 10, "pending"), (10, 30.0, "up")]
    assert states["scorer-1"] == [(0.0, 11, "up"), (11, 30.0, "stopped")]


def test_in_force_during_a_run_names_open_windows_and_members_not_up() -> None:
    history = _history((2, "partition", "scorer-1 | scorer-2,scorer-3,executor-1"), (3, "loss", "scorer-2 20%"),
                       (4, "pause", "scorer-3"), (6, "loss", "scorer-2 0%"))
    history.ended_at = 0.0  # still running: open windows last
    assert in_force(history, 5) == ["partition scorer-1 | scorer-2,scorer-3,executor-1", "loss scorer-2 20%",
                                    "scorer-3 paused"]
    assert in_force(history, 7) == ["partition scorer-1 | scorer-2,scorer-3,executor-1", "scorer-3 paused"]
    assert in_force(history, 1) == []


def test_a_simulated_partition_replaces_a_one_way_cut_entirely() -> None:
    import random

    import trio

    from chaos.sim.network import SimFabric

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            for peer in ("a", "b", "c"):
                fabric.bring_up(fabric.endpoint(peer))
            fabric.one_way(["a"], ["b", "c"])
            assert fabric.cut == "oneway" and fabric.can_send("b", "a") and not fabric.can_send("a", "b")
            fabric.partition([["a"], ["b", "c"]])
            assert fabric.cut == "partition"
            # before the fix, the one-way rule survived and let b's gossip cross the cut to a
            assert not fabric.can_send("b", "a") and not fabric.can_send("a", "b") and fabric.can_send("b", "c")
            fabric.heal()
            assert fabric.cut is None and fabric.can_send("a", "b")
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_toxics_add_up_and_an_untoxic_ends_them_all() -> None:
    history = _history((1, "toxic", "scorer-1 latency downstream {}"), (3, "toxic", "scorer-1 reset_peer upstream {}"),
                       (4, "loss", "scorer-1 10%"), (6, "untoxic", "scorer-1"), (7, "loss", "scorer-1 0%"))
    windows = [(w.kind, w.start, w.end, w.members) for w in fault_windows(history)]
    assert windows == [("toxic", 1, 6, ("scorer-1",)), ("toxic", 3, 6, ("scorer-1",)), ("loss", 4, 7, ("scorer-1",))]


def test_a_disk_fault_lasts_until_the_disk_is_free_or_working_again() -> None:
    history = _history((1, "disk", "scorer-1 full"), (3, "disk", "scorer-1 free"),
                       (4, "disk", "executor-1 failing (every fsync answers EIO)"),
                       (5, "crash", "executor-1 (it stopped itself: its disk failed an fsync; exit 1)"),
                       (9, "disk", "executor-1 working again (a new disk under its old store)"),
                       (9.5, "restart", "executor-1"), (12, "disk", "scorer-2 failing"), (14, "disk", "scorer-2 working"))
    windows = [(w.kind, w.start, w.end, w.members) for w in fault_windows(history)]
    assert windows == [("disk", 1, 3, ("scorer-1",)), ("disk", 4, 9, ("executor-1",)), ("disk", 12, 14, ("scorer-2",))]
    assert member_states(history)["executor-1"] == [(0.0, 5, "up"), (5, 9.5, "down"), (9.5, 30.0, "up")]

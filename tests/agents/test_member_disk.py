"""What a member's commits wait for: the disk, only where something depends on it.

Its own events are fsynced before anything else happens to them (nobody else may hold
them yet); others' events are committed without an fsync (a killed process keeps them;
a power cut may take the last few, which their authors still hold) until the member
is about to show a change of its tree, which is final: then everything is fsynced
first. The simulation's store keeps its files as of its last fsync (what a power cut
leaves), which is what these tests read. The simulated power cuts themselves
(``lostwrite``) and the checkers that judge them: ``tests/chaos/test_planted_bugs.py``.
"""

from __future__ import annotations

from pathlib import Path

from agents.core.events import Event, ProposalBody, Subgoal
from agents.member import Member
from agents.store import EventStore
from chaos.sim.slot import SimStore, restore_image
from tests.agents.test_rounds import Board
from tests.builders import credentials


def on_disk_after_a_power_cut(store: SimStore, where: Path) -> set[str]:
    """The ids a store would hold had a power cut struck now (opened from a copy in ``where``)."""
    where.mkdir()
    restore_image(where, store.durable)
    with EventStore.open(where) as survivor:
        return {e.id for e in survivor.events()}


def test_own_events_wait_for_the_disk_and_others_wait_until_a_decision_rests_on_them(tmp_path: Path) -> None:
    board = Board(tag="disk")
    store = SimStore.open(tmp_path / "member")
    member = Member(credentials("disk/x", "decomposer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=False, now_ms=lambda: 10_000)
    try:
        heard = list(board.events)  # the goal and two drafts: nothing shown
        member._admit(heard, "gossip")
        assert member.tree.nodes[board.node].split is None
        assert on_disk_after_a_power_cut(store, tmp_path / "cut1") == set()

        assert member.author is not None
        own: Event = member.author.sign(ProposalBody(node=board.node, strategy="mine", subgoals=(
            Subgoal(title="Book the ryokan", executable=True), Subgoal(title="Buy the rail pass", executable=True))))
        member._admit([own], "self")  # shows nothing either, and is on the disk with all before it
        assert on_disk_after_a_power_cut(store, tmp_path / "cut2") == {e.id for e in (*heard, own)}

        before = len(board.events)
        draft = board.accept(("Kyoto lodging", "Tokyo rail pass"), "disk")  # candidate and two ballots
        member._admit(board.events[before:-1], "gossip")  # one ballot short: nothing shown
        assert member.tree.nodes[board.node].split is None
        assert on_disk_after_a_power_cut(store, tmp_path / "cut3") == {e.id for e in (*heard, own)}
        member._admit(board.events[-1:], "gossip")  # the quorum: the split is shown, after an fsync
        assert member.tree.nodes[board.node].split == draft.id
        assert on_disk_after_a_power_cut(store, tmp_path / "cut4") == {e.id for e in (*board.events, own)}
    finally:
        member.close()
        store.close()

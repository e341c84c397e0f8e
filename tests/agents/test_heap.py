"""A member's event set leaves the cyclic collector's walks once it is held for good, and
nothing walks it while it is read back or folded."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import pytest

from agents import heap
from agents.cli.main import build_parser, run_command
from agents.heap import SETTLE_EVERY, Settler, settled
from agents.member import Member
from agents.store import EventStore
from bench.synthetic import plan_log
from tests.builders import credentials


def test_every_settle_every_events_the_heap_is_frozen_and_nothing_before() -> None:
    gc.unfreeze()
    try:
        settler = Settler()
        assert not settler.held(SETTLE_EVERY - 1) and gc.get_freeze_count() == 0
        kept = [{"an": "object the collector tracks"} for _ in range(100)]
        assert settler.held(1)
        assert gc.get_freeze_count() >= len(kept), "what was alive is in the permanent generation"
        assert not settler.held(SETTLE_EVERY - 1), "the count starts again"
    finally:
        gc.unfreeze()


def test_no_collection_runs_inside_settled_and_the_collector_comes_back_as_it_was() -> None:
    assert gc.isenabled()
    with settled():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with settled():
            pass
        assert not gc.isenabled(), "a collector off before stays off"
    finally:
        gc.enable()


def test_overlapping_settled_blocks_keep_the_collector_off_until_the_last_leaves() -> None:
    """As two threads' blocks may overlap: the first leaves while the second is inside."""
    first, second = settled(), settled()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    try:
        assert not gc.isenabled(), "the second is still inside"
    finally:
        second.__exit__(None, None, None)
    assert gc.isenabled(), "on again, as it was before the first"


def collections_during(action: Callable[[], object]) -> list[int]:
    """The generation of each collection that ran while ``action`` did."""
    ran: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            ran.append(info["generation"])

    gc.collect()  # what came before is not counted against the action
    gc.callbacks.append(note)
    try:
        action()
    finally:
        gc.callbacks.remove(note)
    return ran


@pytest.fixture(scope="module")
def stored_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a whole plan's signed events (728: each some twenty objects, many times
    what sets off a collection of the youngest generation)."""
    where = tmp_path_factory.mktemp("plan")
    events = list(plan_log(goals=1, branch=3, depth=4))
    with EventStore.open(where) as store:
        store.add_many(events)
    assert len(events) * 20 > 5 * gc.get_threshold()[0]
    return where


def test_reading_a_store_back_walks_its_events_once_at_most(stored_plan: Path) -> None:
    """One collection of the youngest generation when the collector comes back, where every 700
    objects made set one off (20 or more here)."""
    with EventStore.open(stored_plan) as store:
        events: list = []
        assert collections_during(lambda: events.extend(store.events())) in ([], [0])
        author = events[0].author
        assert collections_during(lambda: store.events_by(author)) in ([], [0])
    assert gc.isenabled()


def test_a_member_starting_on_its_store_collects_once_after_its_first_fold(stored_plan: Path, monkeypatch) -> None:
    monkeypatch.setattr(heap, "SETTLE_EVERY", 50)  # so that this store's events make a settle
    gc.unfreeze()
    try:
        with EventStore.open(stored_plan) as store:
            started: list[Member] = []
            ran = collections_during(lambda: started.append(Member(credentials("heap/o", "observer"), store,
                                                                   network=None)))  # type: ignore[arg-type]
            held = store.count()
            assert started[0].tree.events == held
            started[0].close()
        # nothing before the settle's full collection; one young collection after it at most
        assert ran[:1] == [2] and ran[1:] in ([], [0]), "nothing the load or the fold set off"
        assert gc.get_freeze_count() > 20 * held, "the events and the tree are settled"
    finally:
        gc.unfreeze()


def test_swarm_inspect_walks_what_it_read_once_at_most_and_leaves_the_collector_on(stored_plan: Path,
                                                                                    capsys) -> None:
    args = build_parser().parse_args(["inspect", str(stored_plan)])
    codes: list[int] = []
    assert collections_during(lambda: codes.append(run_command(args))) in ([], [0])
    assert codes == [0] and "728 events" in capsys.readouterr().out
    assert gc.isenabled()


def test_an_observe_that_only_catches_up_is_one_shot_and_one_that_stays_is_not() -> None:
    parse = build_parser().parse_args
    assert parse(["observe", "--data-dir", "d"]).one_shot(parse(["observe", "--data-dir", "d"]))
    for staying in (["--follow"], ["--until-complete"], ["--web", "127.0.0.1:8080"]):
        args = parse(["observe", "--data-dir", "d", *staying])
        assert not args.one_shot(args), staying
    assert not hasattr(parse(["agent", "--role", "scorer", "--data-dir", "d"]), "one_shot")

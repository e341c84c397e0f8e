"""A member's event set leaves the cyclic collector's walks once it is held for good."""

from __future__ import annotations

import gc

from agents.heap import SETTLE_EVERY, Settler, settled


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

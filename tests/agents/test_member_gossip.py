"""Gossip that arrives together is taken together: one transaction and one fold for a batch.

A member behind on its gossip (thirty members on two cores) stored and folded each event
alone: a commit (then an fsync) and a fold of the whole set per event, which put it further
behind. What it shows after a batch is what it would show after the events one by one.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio
import trio.testing

from agents.core.events import Event
from agents.core.fold import fold
from agents.member import GOSSIP_BATCH, Member
from agents.store import EventStore
from chaos.sim.identities import EPOCH_MS
from chaos.sim.network import SimFabric, SimNetwork
from tests.builders import Feed, credentials, goal, identity


def _now_ms() -> int:
    return EPOCH_MS + int(trio.current_time() * 1000)


def test_gossip_already_queued_is_stored_in_one_transaction_and_folded_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed = Feed("writer", "client")
    events = [feed.at(EPOCH_MS - 10_000 + i, goal(f"Goal {i}", [identity("writer").peer_id], 1))
              for i in range(GOSSIP_BATCH + 44)]
    raws = [e.to_wire() for e in events]
    raws.insert(7, raws[3])  # a copy gossiped twice is taken once
    stored: list[int] = []
    waited: list[bool] = []  # whether each commit waited for the disk
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            network = SimNetwork(fabric, identity("watcher").peer_id)
            member = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                            think_in_thread=False, now_ms=_now_ms)
            store_many = member.store.add_many

            def counted_store(batch: list[Event], durable: bool = True) -> int:
                stored.append(len(batch))
                waited.append(durable)
                return store_many(batch, durable)

            monkeypatch.setattr(member.store, "add_many", counted_store)
            for raw in raws:  # all here before the member's receive loop first runs
                network.deliver(raw)
            network.attach(nursery)
            folds = member.stats.folds
            await nursery.start(member.run)
            with trio.move_on_after(30):
                while len(member.index) < len(events):
                    await trio.sleep(0.1)
            outcome.update(folds=member.stats.folds - folds, digest=member.tree.digest,
                           admitted=member.stats.received)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert stored == [GOSSIP_BATCH - 1, 45], stored  # GOSSIP_BATCH payloads to a batch; the copy stored once
    # neither goals (they wait for the disk only once a summary is to list them) nor others'
    # events wait for it (tests/agents/test_member_disk.py)
    assert waited == [False, False]
    assert outcome["folds"] == 2, outcome  # one fold per batch, not one per event
    assert outcome["digest"] == fold(events).digest
    assert outcome["admitted"] == len(events)  # the copy was taken once

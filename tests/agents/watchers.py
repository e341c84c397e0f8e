"""A watcher member and the peers it pulls from, on the simulation's fabric with every
gossip message lost, so that only pulls carry events: the pull tests' common set-up."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import trio

from agents.member import Member
from agents.store import EventStore
from chaos.sim.identities import EPOCH_MS
from chaos.sim.network import SimFabric, SimNetwork
from tests.builders import credentials, identity


def now_ms() -> int:
    """The members' wall clock: the simulation's epoch plus trio's (mock) time."""
    return EPOCH_MS + int(trio.current_time() * 1000)


async def watching(nursery: trio.Nursery, tmp_path: Path, serving: dict[str, Callable],
                   network_type: type[SimNetwork] = SimNetwork) -> tuple[Member, SimNetwork]:
    """An observer member (``watcher``, running) connected to one peer per ``serving`` entry
    (peer id -> its sync stream handler), all brought up in that order."""
    fabric = SimFabric(random.Random(0), nursery)
    fabric.weather.loss = 1.0
    network = network_type(fabric, identity("watcher").peer_id)
    watcher = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                     think_in_thread=False, now_ms=now_ms)
    network.attach(nursery)
    await nursery.start(watcher.run)
    fabric.bring_up(network)
    for peer_id, serve in serving.items():
        endpoint = fabric.endpoint(peer_id)
        endpoint.serve(serve)
        endpoint.attach(nursery)
        fabric.bring_up(endpoint)
    return watcher, network

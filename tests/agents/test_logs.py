"""The console stays readable: py-libp2p's stdlib records go through structlog, repeats counted."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

import agents.net.p2p  # noqa: F401 (importing libp2p detaches its logger: the case that matters)
from agents import logs


@pytest.fixture(autouse=True)
def _restore_logging():
    """``logs.configure`` binds structlog and the root handler to this test's captured stderr,
    which pytest closes after it: later tests that log in-process would write to a closed file."""
    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_libp2p_records_render_as_json_and_known_noise_is_shown_once_then_counted(capsys) -> None:
    logs.configure(json_lines=True, level="info")
    noisy = logging.getLogger("libp2p.host.basic_host")
    for peer in ("A", "B", "C"):
        noisy.warning("Failed to open stream to peer %s:\n  Timeout: 30s\n  Connection: Yamux", peer)
    noisy.warning("something new and worth seeing")
    logging.getLogger("libp2p.pubsub").info("below the level: not shown")
    chatty = logging.getLogger("libp2p.network.auto_connector")  # sets its own level to INFO
    chatty.setLevel(logging.INFO)
    chatty.info("AUTO_CONNECTOR_STATE: not shown either")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["level"] for line in lines] == ["warning", "warning"]
    assert lines[0]["event"].startswith("Failed to open stream to peer A (repeats are counted")
    assert lines[0]["logger"] == "libp2p.host.basic_host"
    assert lines[1]["event"] == "something new and worth seeing"
    assert logs.noise_counts() == {"stream-open-failed": 3}


def test_a_graft_refused_in_backoff_is_counted_as_a_crossing_not_repeated(capsys) -> None:
    """A GRAFT that left its sender before our PRUNE reached it is refused (the spec's answer):
    fifty members starting on two cores logged hundreds of these warnings in their first
    seconds. The first is shown; the rest are counted under their kind."""
    logs.configure(json_lines=True, level="info")
    gossip = logging.getLogger("libp2p.pubsub.gossipsub")
    for peer in ("12D3KooWA", "12D3KooWB", "12D3KooWA"):
        gossip.warning("GRAFT: ignoring request from %s, back off until %d", peer, 1796504318)
    gossip.warning("GRAFT flood detected from peer 12D3KooWC for topic t, applying penalty")
    for _ in range(2):  # a direct peer's GRAFT refused is a configuration error: always shown
        gossip.warning("GRAFT: ignoring request from direct peer %s", "12D3KooWD")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"].split(" (repeats")[0] for line in lines] == [
        "GRAFT: ignoring request from 12D3KooWA, back off until 1796504318",
        "GRAFT flood detected from peer 12D3KooWC for topic t, applying penalty",
        "GRAFT: ignoring request from direct peer 12D3KooWD",
        "GRAFT: ignoring request from direct peer 12D3KooWD"]
    assert logs.noise_counts() == {"graft-in-backoff": 3, "graft-flood": 1}

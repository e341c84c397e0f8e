"""A model call the tree no longer wants is dropped while the model works on it.

A scorer assessing a draft whose node the others decide meanwhile, an executor whose claim
is lost: what they would sign can no longer count, and on a batched model service their
tokens slow every other call of the batch. The member drops such a call (``_drop_moot``):
a real backend gives up between two tokens on its worker thread, a simulated call's wait ends.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trio

from agents.acting import _compose_here
from agents.core.events import (
    AckBody,
    ClaimBody,
    FailureBody,
    ResultBody,
    VoteBody,
)
from agents.core.fold import fold
from agents.llm.base import CallDropped, ScoreRequest
from agents.llm.prompted import PromptedBackend
from agents.llm.scripted import ScriptedBackend
from agents.member import Member
from agents.roles import Me, Vote
from agents.store import EventStore
from chaos.sim.network import SimFabric, SimNetwork
from tests.agents.test_rounds import Board
from tests.builders import Feed, credentials, identity

TOKENS = 3000  # a slow answer: 30 s of "tokens" unless dropped
ANSWER = '{"clarity": 4, "non_overlap": 4, "coverage": 4, "reason": "fine"}'


class SlowStreamingModel(PromptedBackend):
    """A real backend's shape (``PromptedBackend``'s retries and checks) over a model that draws a
    token every 10 ms and, like the OpenAI and llama backends, looks for a drop between tokens."""

    name = "slow-stand-in"
    model = "slow"

    def __init__(self, tokens: int = TOKENS) -> None:
        super().__init__()
        self.answer_tokens = tokens
        self.started = threading.Event()
        self.tokens_drawn: list[int] = []  # per call: how many tokens before it ended
        self.threads: set[int] = set()

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        self.threads.add(threading.get_ident())
        self.started.set()
        for token in range(self.answer_tokens):
            if self._dropped():
                self.tokens_drawn.append(token)
                raise CallDropped(f"dropped after {token} tokens")
            time.sleep(0.01)
        self.tokens_drawn.append(self.answer_tokens)
        self._used(self.answer_tokens, self.answer_tokens / 100)
        return ANSWER


def _decide_while_thinking(tmp_path: Path, backend: Any, think_in_thread: bool,
                           hold_still: bool = False) -> dict[str, Any]:
    """A scorer member assesses a draft of the board's root; while it does, the other two
    scorers accept the other draft (or, ``hold_still``, the member is told to sign nothing
    more). What the member did is returned."""
    board = Board(tag="drop")
    me = board.others(1)[1]  # neither round 1's coordinator nor the scorer that ballots with it
    outcome: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            network = SimNetwork(fabric, me.peer_id)
            member = Member(credentials("drop/s" + str(board.scorers.index(me)), "scorer"),
                            EventStore.open(tmp_path / "scorer"), network, backend=backend,
                            think_in_thread=think_in_thread, now_ms=lambda: 150,  # rounds never time out
                            new_key=True)
            assert member.author is not None and member.author.peer_id == me.peer_id
            assert member.own is not None and member.own.learned([], member.tree, "no peer here", 0)  # may sign
            for event in board.events:
                network.deliver(event.to_wire())
            network.attach(nursery)
            await nursery.start(member.run)
            with trio.fail_after(20):
                while not member._thoughts:
                    await trio.sleep(0.01)
            outcome["thinking"] = set(member._thoughts)
            if isinstance(backend, SlowStreamingModel):
                await trio.to_thread.run_sync(backend.started.wait)  # the model is drawing tokens
            candidate = board.candidate(1, board.w)
            decided = [candidate, board.ballot(board.coordinator(1), candidate),
                       board.ballot(board.others(1)[0], candidate)]
            assert board.split() == board.w
            started = trio.current_time()
            if hold_still:
                member.hold_still()
            else:
                for event in decided:
                    network.deliver(event.to_wire())
            with trio.fail_after(10):
                while member._thoughts or (member.tree.nodes[board.node].split is None and not hold_still):
                    await trio.sleep(0.01)
            outcome["seconds"] = trio.current_time() - started  # a publish ends before its thought leaves
            outcome["stats"] = member.stats
            outcome["signed"] = [e for e in member.store.events() if e.author == me.peer_id]
            nursery.cancel_scope.cancel()

    trio.run(main)
    return outcome


def test_a_vote_under_way_on_a_real_worker_thread_is_dropped_once_its_node_is_decided(tmp_path: Path) -> None:
    backend = SlowStreamingModel()
    outcome = _decide_while_thinking(tmp_path, backend, think_in_thread=True)
    assert outcome["thinking"] <= {Vote(d.id) for d in Board(tag="drop").drafts}
    assert backend.threads and threading.get_ident() not in backend.threads  # it ran on a worker thread
    assert len(backend.tokens_drawn) == 1 and backend.tokens_drawn[0] < TOKENS // 3, backend.tokens_drawn
    assert outcome["seconds"] < 10
    assert outcome["stats"].model_calls_dropped == 1 and outcome["stats"].model_calls == 1
    assert not [e for e in outcome["signed"] if isinstance(e.body, VoteBody)], "a dropped vote was signed"
    assert backend.calls == 0 and backend.tokens == 0  # a dropped call answers nothing


def test_a_simulated_vote_is_dropped_in_its_wait_once_its_node_is_decided(tmp_path: Path) -> None:
    outcome = _decide_while_thinking(tmp_path, ScriptedBackend(seed=1, latency=60.0), think_in_thread=False)
    assert outcome["seconds"] < 10  # not the 30-90 s the scripted call would have waited
    assert outcome["stats"].model_calls_dropped == 1
    assert not [e for e in outcome["signed"] if isinstance(e.body, VoteBody)], "a dropped vote was signed"


def test_a_member_told_to_hold_still_drops_its_calls_under_way(tmp_path: Path) -> None:
    backend = SlowStreamingModel()
    outcome = _decide_while_thinking(tmp_path, backend, think_in_thread=True, hold_still=True)
    assert backend.tokens_drawn and backend.tokens_drawn[0] < TOKENS // 3, backend.tokens_drawn
    assert outcome["stats"].model_calls_dropped == 1
    assert not [e for e in outcome["signed"] if isinstance(e.body, VoteBody)]


def test_a_drop_reaches_only_the_call_it_was_given_for() -> None:
    """Worker threads are reused: after a dropped call, the next call made on the same thread
    (through ``_compose_here`` or not) is not dropped."""
    board = Board(tag="reuse")
    tree = fold(board.events)
    me = Me(board.scorers[2].peer_id, "scorer")
    backend = SlowStreamingModel(tokens=20)
    dropped = threading.Event()
    dropped.set()
    with ThreadPoolExecutor(1) as thread:
        with pytest.raises(CallDropped):
            thread.submit(_compose_here, Vote(board.v), tree, backend, me, dropped).result()
        assert backend.tokens_drawn == []  # given up before it was sent
        request = ScoreRequest("plan", ("plan",), "s0", ("a0", "b0"))
        scores = thread.submit(backend.score, request).result(timeout=60)
    assert scores.clarity >= 1 and backend.tokens_drawn == [20]


class GatedModel(PromptedBackend):
    """Answers once ``release`` is set, looking for a drop every 10 ms meanwhile; two calls at once."""

    name = "gated-stand-in"
    model = "gated"
    parallel = 2

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.inside = 0
        self.dropped: list[str] = []
        self._count = threading.Lock()

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        with self._count:
            self.inside += 1
        try:
            while not self.release.wait(0.01):
                if self._dropped():
                    self.dropped.append(messages[1]["content"])
                    raise CallDropped("dropped while waiting")
            self._used(12, 0.1)
            return "Book the Hoshinoya ryokan in Kyoto for three nights at 90,000 yen and confirm by email."
        finally:
            with self._count:
                self.inside -= 1


def test_of_two_leaves_under_way_only_the_one_whose_claim_was_lost_is_dropped(tmp_path: Path) -> None:
    board = Board(tag="dropx")
    board.accept(("Kyoto lodging", "Tokyo rail pass", "Osaka food tour"), "dropx")
    backend, rival = GatedModel(), Feed("dropx/y", "executor")
    outcome: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            member = Member(credentials("dropx/x", "executor"), EventStore.open(tmp_path / "x"),
                            network := SimNetwork(fabric, identity("dropx/x").peer_id), backend=backend,
                            think_in_thread=True, now_ms=lambda: 150, new_key=True)
            assert member.own is not None and member.own.learned([], member.tree, "no peer here", 0)
            for event in board.events:
                network.deliver(event.to_wire())
            network.attach(nursery)
            await nursery.start(member.run)
            acked: set[str] = set()
            with trio.fail_after(20):  # grant each claim it makes, until it works on two leaves
                while len(member._thoughts) < 2 or backend.inside < 2:
                    for claim in [e for e in member.store.events() if isinstance(e.body, ClaimBody)]:
                        if claim.id not in acked:
                            acked.add(claim.id)
                            for s in board.scorers[:2]:
                                network.deliver(board._add(s, AckBody(leaf=claim.body.leaf, claim=claim.id,
                                                                      epoch=claim.body.epoch)).to_wire())
                    await trio.sleep(0.01)
            lost, kept = sorted(member._thoughts, key=lambda i: i.leaf)
            taken = board._add(rival, ClaimBody(leaf=lost.leaf, epoch=2))
            for s in board.scorers[:2]:
                board._add(s, AckBody(leaf=lost.leaf, claim=taken.id, epoch=2))
            assert fold(board.events + list(member.store.events())).nodes[lost.leaf].executor == rival.peer_id
            for event in board.events[-3:]:
                network.deliver(event.to_wire())
            with trio.fail_after(10):
                while set(member._thoughts) != {kept}:
                    await trio.sleep(0.01)
            outcome["dropped"] = list(backend.dropped)
            backend.release.set()
            with trio.fail_after(10):
                while member._thoughts:
                    await trio.sleep(0.01)
            outcome.update(lost=lost, kept=kept, stats=member.stats,
                           signed=[e for e in member.store.events() if e.author == identity("dropx/x").peer_id])
            nursery.cancel_scope.cancel()

    trio.run(main)
    kept = outcome["kept"]
    assert len(outcome["dropped"]) == 1 and outcome["stats"].model_calls_dropped == 1
    results = [e.body for e in outcome["signed"] if isinstance(e.body, ResultBody)]
    assert [(r.leaf, r.claim) for r in results] == [(kept.leaf, kept.claim)]  # the other call went on
    assert not [e for e in outcome["signed"] if isinstance(e.body, FailureBody)]

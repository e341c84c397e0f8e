"""A member with ``parallel`` above 1 asks one backend from several threads at once: what each
call saw (the model reached or not, the tokens it drew) stays with the thread that made it."""

from __future__ import annotations

import contextlib
import threading

import pytest

from agents.llm.base import (
    CallDropped,
    DecomposeRequest,
    ExecuteRequest,
    ModelUnavailable,
    ScoreRequest,
)
from agents.llm.prompted import PromptedBackend


class _TwoAtOnce(PromptedBackend):
    """Holds two calls inside the model together; one cannot reach it, the other answers once the
    first has failed (so a record shared between threads would show the failure to the second)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Barrier(2, timeout=10)
        self.failed = threading.Event()

    def _generate(self, messages, schema, max_tokens, allow_cut=False) -> str:
        self.inside.wait()
        if messages[-1]["content"] == "down":
            self.failed.set()
            raise ModelUnavailable("the server went away")
        assert self.failed.wait(10)
        self._used(int(messages[-1]["content"]), 0.5)
        return "ok"


def test_calls_on_two_threads_each_see_their_own_reach_and_tokens() -> None:
    backend = _TwoAtOnce()
    seen: dict[str, tuple[str | None, int]] = {}

    def ask(content: str) -> None:
        with contextlib.suppress(ModelUnavailable):  # the failed call: what it saw is read below
            backend._call([{"role": "user", "content": content}], None, 10)
        seen[content] = (backend.unavailable, backend.tokens_here())

    threads = [threading.Thread(target=ask, args=(content,)) for content in ("down", "7")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == {"down": ("the server went away", 0), "7": (None, 7)}
    assert (backend.calls, backend.tokens, backend.seconds) == (1, 7, pytest.approx(0.5))


class _DroppedInside(PromptedBackend):
    """A model whose every answer is dropped while it is drawn (the member's drop was set)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def _generate(self, messages, schema, max_tokens, allow_cut=False) -> str:
        self.sent += 1
        raise CallDropped("dropped after 3 tokens")


def test_a_dropped_call_is_not_retried_nor_counted_as_a_bad_answer() -> None:
    backend = _DroppedInside()
    with pytest.raises(CallDropped):
        backend.score(ScoreRequest("g", ("g",), "s", ("a", "b")))
    with pytest.raises(CallDropped):
        backend.execute(ExecuteRequest("g", ("g", "leaf"), ""))
    assert backend.sent == 2  # one try each: retries are for unusable answers
    assert (backend.vague_retries, backend.vague_answers, backend.calls) == (0, 0, 0)
    assert backend.unavailable is None  # the model was reached: no back-off follows a drop


class _Answers(PromptedBackend):
    """A model that gives the split it was handed, as JSON."""

    def __init__(self, titles: list[str]) -> None:
        super().__init__()
        self.titles = titles

    def _generate(self, messages, schema, max_tokens, allow_cut=False) -> str:
        import json
        return json.dumps({"strategy": "geography", "subgoals": [
            {"title": t, "description": "", "executable": True} for t in self.titles]})


def test_a_subgoal_that_restates_the_task_is_dropped_from_the_split() -> None:
    """Seen in make swarm: "Plan a two-week trip to Japan" accepted as a part of itself."""
    request = DecomposeRequest("Plan a two-week trip to Japan", ("Plan a two-week trip to Japan",), "",
                               depth=0, max_depth=3, strategy="geography", taken=())
    split = _Answers(["Plan a two-week trip to Japan", "Book the Tokyo hotel", "Japan trip plan",
                      "Buy a rail pass"]).decompose(request)
    assert [s.title for s in split.subgoals] == ["Book the Tokyo hotel", "Buy a rail pass"]
    split = _Answers(["Buy a rail pass", "Book the Tokyo hotel", "buy a pass, rail", "Book the Tokyo hotel"]
                     ).decompose(request)
    assert [s.title for s in split.subgoals] == ["Buy a rail pass", "Book the Tokyo hotel"]
    split = _Answers(["Plan a two-week trip to Japan", "Book the hotel", "Book the hotel"]).decompose(request)
    assert [s.title for s in split.subgoals] == ["Book the hotel", "Book the hotel"]  # the scorers refuse it
    # a task that names its parts keeps them: the scorers judge that draft
    parts = DecomposeRequest("Plan a trip", ("Plan a trip", "Book flights and hotels"), "", depth=1, max_depth=3,
                             strategy="geography", taken=())
    split = _Answers(["Book flights", "Book hotels", "Flights and hotels booked"]).decompose(parts)
    assert [s.title for s in split.subgoals] == ["Book flights", "Book hotels", "Flights and hotels booked"]
    split = _Answers(["Book flights", "Book hotels", "Pay the Kyoto ryokan deposit"]).decompose(parts)
    assert [s.title for s in split.subgoals] == ["Book flights", "Book hotels", "Pay the Kyoto ryokan deposit"]

"""A member with ``parallel`` above 1 asks one backend from several threads at once: what each
call saw (the model reached or not, the tokens it drew) stays with the thread that made it."""

from __future__ import annotations

import contextlib
import threading

import pytest

from agents.llm.base import ModelUnavailable
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

"""A backend call made the way a member makes it (``agents.acting._compose_here``): on a worker
thread, dropped once ``drop`` is set. Shared by the backend tests."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agents.llm.prompted import PromptedBackend

LONG_ANSWER = [{"role": "user", "content": "Write a very long essay about the history of Japan."}]


def generate_on_a_thread(backend: PromptedBackend, drop: threading.Event | None = None,
                         messages: list[dict[str, str]] | None = None, schema: dict[str, Any] | None = None,
                         max_tokens: int = 50, allow_cut: bool = False) -> Future:
    """``_generate`` on a fresh worker thread; the future holds its answer or its error."""
    def call() -> str:
        backend.drop_when(drop)
        try:
            return backend._generate(messages or [{"role": "user", "content": "hi"}], schema, max_tokens,
                                     allow_cut)
        finally:
            backend.drop_when(None)

    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)  # the thread ends with its call
    return future

"""The ``openai`` backend against a real OpenAI-compatible server: llama.cpp's own, started here."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from agents.cli.plan import free_port
from agents.llm.base import DecomposeRequest, LLMError, ScoreRequest
from agents.llm.model_files import default_model
from agents.llm.openai_compat import OpenAIBackend

GOAL = "Organise a wedding for 80 guests"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model().path), "--host", "127.0.0.1",
         "--port", str(port), "--n_threads", "2", "--n_ctx", "2048", "--interrupt_requests", "False"],
        stdout=log, stderr=log,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, f"llama_cpp.server exited; see {log.name}"
        assert time.monotonic() < deadline, "llama_cpp.server did not answer within 120 s"
        time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(10)


@pytest.mark.llm
def test_the_openai_backend_splits_and_scores_through_a_real_server(server_url: str) -> None:
    backend = OpenAIBackend(server_url)
    split = backend.decompose(DecomposeRequest(GOAL, (GOAL,), "", 0, 2, "activity", ()))
    assert 2 <= len(split.subgoals) <= 6 and all(s.title for s in split.subgoals)
    vague = backend.score(ScoreRequest(GOAL, (GOAL,), "vague", ("Organise the wedding", "Do wedding things")))
    assert not vague.approve
    assert backend.calls >= 2 and backend.tokens > 0


def test_an_unreachable_server_is_a_clear_error() -> None:
    backend = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", timeout_s=2, retries=0)
    with pytest.raises(LLMError, match="cannot reach the model server"):
        backend._generate([{"role": "user", "content": "hi"}], None, 5)


def test_the_openai_backend_needs_a_url() -> None:
    with pytest.raises(LLMError, match="needs --llm-url"):
        OpenAIBackend(None)

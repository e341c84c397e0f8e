"""The real local model (Qwen 0.5B through llama.cpp): few, short, and run in CI like every test."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents.llm.base import CallDropped, DecomposeRequest, ExecuteRequest, ScoreRequest
from agents.llm.llama import LlamaBackend, grammar_for
from agents.llm.prompted import SCORE_SCHEMA, SPLIT_SCHEMA
from tests.agents.llm.dropping import LONG_ANSWER, generate_on_a_thread

GOAL = "Plan a two-week trip to Japan"


def test_the_json_grammar_keeps_control_characters_out_of_strings() -> None:
    for schema in (SPLIT_SCHEMA, SCORE_SCHEMA):
        grammar = grammar_for(schema)
        char_rule = next(line for line in grammar.splitlines() if line.startswith("char ::="))
        assert "\\x00-\\x1F" in char_rule and "\\x7F" in char_rule
    # scores are an enum: llama-cpp-python 0.3.36 ignores integer minimum/maximum
    assert 'clarity ::= "1" | "2" | "3" | "4" | "5"' in grammar_for(SCORE_SCHEMA).splitlines()


@pytest.fixture(scope="module")
def model() -> LlamaBackend:
    return LlamaBackend(threads=2, seed=7)


@pytest.mark.llm
def test_a_vague_split_loses_to_a_real_one(model: LlamaBackend) -> None:
    chain = (GOAL,)
    vague = model.score(ScoreRequest(GOAL, chain, "vague", ("Go to Japan", "Do things in Japan")))
    real = model.score(ScoreRequest(GOAL, chain, "geography", (
        "Tokyo: Shinjuku, Asakusa and a day trip to Nikko",
        "Kyoto temples and Nara's deer park",
        "Osaka street food and the Hiroshima peace memorial",
    )))
    assert not vague.approve
    assert real.approve, real.reason
    assert (real.clarity + real.non_overlap + real.coverage) > (vague.clarity + vague.non_overlap + vague.coverage)


@pytest.mark.llm
def test_the_model_splits_a_goal_into_valid_subgoals_and_answers_a_leaf(model: LlamaBackend) -> None:
    split = model.decompose(DecomposeRequest(GOAL, (GOAL,), "", 0, 3, "geography", ()))
    assert 2 <= len(split.subgoals) <= 6
    assert all(s.title.strip() and "\x00" not in s.title for s in split.subgoals)
    answer = model.execute(ExecuteRequest(GOAL, (GOAL, split.subgoals[0].title), split.subgoals[0].description))
    assert answer.strip()
    assert model.calls >= 2 and model.tokens > 0


@pytest.mark.llm
def test_a_dropped_call_stops_between_two_tokens_and_frees_the_model(model: LlamaBackend) -> None:
    drop = threading.Event()
    with ThreadPoolExecutor(1) as thread:
        dropped = generate_on_a_thread(model, drop, LONG_ANSWER, max_tokens=1000, allow_cut=True)
        time.sleep(2)  # loading the prompt and drawing the first tokens
        drop.set()
        dropped_at = time.monotonic()
        with pytest.raises(CallDropped, match="dropped after"):
            dropped.result(60)
        assert time.monotonic() - dropped_at < 10, "the model went on past the drop"  # 1,000 tokens: ~50 s
        calls = model.calls
        assert thread.submit(model._generate, [{"role": "user", "content": "Name a city in Japan."}], None, 10,
                             True).result(60)  # the model's lock is free again
    assert model.calls == calls + 1

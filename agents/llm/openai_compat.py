"""``openai``: any OpenAI-compatible chat endpoint (llama.cpp's server, Ollama, vLLM, ...).

``--llm-url`` is the API base (e.g. ``http://127.0.0.1:8080/v1``); the key, if
the server wants one, comes from ``SWARM_LLM_API_KEY`` (never from a flag, so it
stays out of process listings and logs). Structured answers ask for
``response_format: json_schema`` (OpenAI's form); a server that rejects it (as
``llama_cpp.server`` 0.3.36 does) is asked with ``json_object`` plus ``schema``,
its own form, from then on. The prompts, retries and deterministic checks are the
same as for the local model (``prompted.py``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from agents.llm.base import LLMError, ModelUnavailable
from agents.llm.prompted import PromptedBackend, trim_cut

API_KEY_VARIABLE = "SWARM_LLM_API_KEY"


class OpenAIBackend(PromptedBackend):
    name = "openai"

    def __init__(self, url: str | None, model: str | None = None, timeout_s: float = 120.0,
                 retries: int = 2, seed: int = 0, parallel: int = 1) -> None:
        super().__init__()
        self.parallel = parallel  # calls a member sends at once: worth more than 1 only if the server batches
        if not url:
            raise LLMError("--llm openai needs --llm-url, the API base of an OpenAI-compatible server "
                           "(e.g. http://127.0.0.1:8080/v1)")
        self.url = url.rstrip("/")
        self.model = model or "default"  # without --model, the name the server answers with (after a call)
        self._named = model is not None
        self.seed = seed  # each member's own, so members asking the same question need not answer alike
        self.retries = retries
        headers = {"Authorization": f"Bearer {key}"} if (key := os.environ.get(API_KEY_VARIABLE)) else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._schema_forms = ["json_schema", "json_object"]  # the first one the server accepts stays first
        self._asked = 0  # calls sent: each draws the next seed

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        with self._totals:  # calls on other threads draw their own seeds and share the learned schema form
            self._asked += 1
            seed = (self.seed + self._asked - 1) % 2**31
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.2, "seed": seed}
        started = time.monotonic()
        while True:
            form = self._schema_forms[0]
            if schema is not None:
                body["response_format"] = (
                    {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
                    if form == "json_schema" else {"type": "json_object", "schema": schema}
                )
            try:
                response = self._client.post(f"{self.url}/chat/completions", json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError) as exc:
                raise ModelUnavailable(f"cannot reach the model server at {self.url}: {exc!r}") from None
            except httpx.HTTPError as exc:
                raise LLMError(f"the model server at {self.url} failed: {exc!r}") from None
            rejected_form = schema is not None and response.status_code in (400, 422, 500) \
                and "response_format" in response.text and form != self._schema_forms[-1]
            if not rejected_form:
                break
            with self._totals:  # another call may have learned it already: drop the form once
                if self._schema_forms[0] == form and len(self._schema_forms) > 1:
                    self._schema_forms.pop(0)
        if response.status_code in (502, 503):
            raise ModelUnavailable(f"the model server at {self.url} is not ready ({response.status_code})")
        if response.status_code != 200:
            raise LLMError(f"the model server answered {response.status_code}: {response.text[:300]}")
        try:
            choice = response.json()["choices"][0]
            text = choice["message"]["content"] or ""
            finish = choice.get("finish_reason")
            usage = response.json().get("usage") or {}
            served_by = response.json().get("model")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"the model server's answer is not an OpenAI chat completion: {exc!r}") from None
        self._used(int(usage.get("completion_tokens") or 0), time.monotonic() - started)
        if not self._named and isinstance(served_by, str) and served_by:
            self.model = served_by[:100]  # recorded in events and plan.json: which model answered
        if finish != "stop" and not (allow_cut and finish == "length"):
            raise LLMError(f"the answer was cut off (finish_reason {finish!r})")
        return trim_cut(text) if finish == "length" else text

"""``llama``: a local GGUF model in process, through llama-cpp-python. No network, no API key.

Structured answers use a JSON-schema grammar, with two fixes that llama-cpp-python
0.3.36 needs (LLM.md): the grammar's ``char`` rule is patched to refuse raw
control characters in strings, and numeric ranges are written as ``enum``
(``minimum``/``maximum`` are ignored). Every answer must end with
``finish_reason == "stop"`` (``"length"`` means cut-off JSON); a bad answer is
retried with the error fed back (``prompted.py``), at most ``retries`` times. A call that runs past ``timeout_s`` is abandoned (tokens are streamed, so it can
be), and so is one the member drops (``PromptedBackend.drop_when``). One generation at a time per backend (a lock), ``n_threads`` set
explicitly: several members on one machine must not oversubscribe the cores.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from agents.llm.base import CallDropped, LLMError
from agents.llm.model_files import ModelFile, ModelFileError, resolve
from agents.llm.prompted import PromptedBackend, trim_cut


def grammar_for(schema: dict[str, Any]) -> str:
    """GBNF for ``schema``, with raw control characters kept out of strings."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(schema))
    patched = gbnf.replace('char ::= [^"\\\\]', 'char ::= [^"\\\\\\x00-\\x1F\\x7F]')
    if patched == gbnf:
        raise LLMError("could not patch the JSON grammar's char rule (llama-cpp-python changed?)")
    return patched


class LlamaBackend(PromptedBackend):
    name = "llama"

    def __init__(self, model: str | None = None, threads: int = 1, n_ctx: int = 2048, seed: int = 0,
                 timeout_s: float = 120.0, retries: int = 2) -> None:
        super().__init__()
        try:
            self.file: ModelFile = resolve(model)
        except ModelFileError as exc:
            raise LLMError(str(exc)) from None
        try:
            from llama_cpp import Llama, LlamaGrammar
        except ImportError:
            raise LLMError("llama-cpp-python is not installed; run 'make install' (it builds it), "
                           "or use --llm openai --llm-url URL") from None
        self._grammar_type = LlamaGrammar
        self._llama = Llama(model_path=str(self.file.path), n_threads=threads, n_threads_batch=threads,
                            n_ctx=n_ctx, seed=seed, verbose=False)
        self.model = f"{self.file.name}@{self.file.sha256[:16]}"
        self.timeout_s = timeout_s
        self.retries = retries
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        grammar = None
        if schema is not None:
            key = json.dumps(schema, sort_keys=True)
            if key not in self._grammars:
                self._grammars[key] = self._grammar_type.from_string(grammar_for(schema), verbose=False)
            grammar = self._grammars[key]
        started = time.monotonic()
        deadline = started + self.timeout_s
        text, finish = [], None
        with self._lock:
            if self._dropped():  # dropped while another call held the model: not even its prompt is read
                raise CallDropped("dropped before it was sent")
            stream = self._llama.create_chat_completion(messages=messages, grammar=grammar, max_tokens=max_tokens,
                                                        temperature=0.2, stream=True)
            for chunk in stream:
                choice = chunk["choices"][0]
                text.append(choice["delta"].get("content") or "")
                finish = choice.get("finish_reason") or finish
                if self._dropped():  # the member no longer wants it: free the model for the next call
                    raise CallDropped(f"dropped after {len(text)} chunks")
                if time.monotonic() > deadline:
                    raise LLMError(f"the model took longer than {self.timeout_s:g} s")
        self._used(len(self._llama.tokenize("".join(text).encode(), add_bos=False)), time.monotonic() - started)
        if finish != "stop" and not (allow_cut and finish == "length"):
            raise LLMError(f"the answer was cut off (finish_reason {finish!r})")
        return trim_cut("".join(text)) if finish == "length" else "".join(text)

"""Language-model backends behind one interface (``Backend``), chosen by name.

Backends register a factory under a name with ``register``; the CLI and the
roles only ever call ``create(name, ...)``. The built-in ones use the same door.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.llm.base import (
    Backend,
    DecomposeRequest,
    ExecuteRequest,
    LLMError,
    ScoreRequest,
    Scores,
    Split,
    SubgoalDraft,
)

_FACTORIES: dict[str, Callable[..., Backend]] = {}
# Model calls each executor and decomposer runs at once on a shared, batched service (``swarm
# model-service``): an executor then works on two leaves together, decoded in one batch.
SHARED_PARALLEL = 2


class UnknownBackendError(LLMError):
    pass


def register(name: str, factory: Callable[..., Backend]) -> None:
    _FACTORIES[name] = factory


def available() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def create(name: str, **options: Any) -> Backend:
    """Build the backend called ``name``; options it does not know are an error."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownBackendError(
            f"unknown LLM backend {name!r}; choose one of: {', '.join(available())}"
        ) from None
    return factory(**options)


# Factories take the same keyword options (seed, latency, model, threads, timeout, url, parallel) and use
# the ones that mean something to them: the CLI need not know which backend wants what.


def _scripted(seed: int = 0, latency: float = 0.0, parallel: int = 1, **_unused: object) -> Backend:
    from agents.llm.scripted import ScriptedBackend

    return ScriptedBackend(seed=seed, latency=latency, parallel=parallel)


def _llama(seed: int = 0, model: str | None = None, threads: int = 1, timeout: float = 120.0,
           **_unused: object) -> Backend:
    from agents.llm.llama import LlamaBackend

    return LlamaBackend(model=model, threads=threads, seed=seed, timeout_s=timeout)


def _openai(url: str | None = None, model: str | None = None, timeout: float = 120.0, seed: int = 0,
            parallel: int = 1, **_unused: object) -> Backend:
    from agents.llm.openai_compat import OpenAIBackend

    return OpenAIBackend(url=url, model=model, timeout_s=timeout, seed=seed, parallel=parallel)


register("scripted", _scripted)
register("openai", _openai)
register("llama", _llama)

__all__ = [
    "Backend",
    "DecomposeRequest",
    "ExecuteRequest",
    "LLMError",
    "ScoreRequest",
    "Scores",
    "Split",
    "SubgoalDraft",
    "UnknownBackendError",
    "available",
    "create",
    "register",
]

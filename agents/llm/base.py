"""What a role asks of a language model, and what it gets back.

Three questions, typed: split this node, score this split, do this leaf. A
backend answers them however it likes (the scripted stand-in from templates,
llama.cpp from a local model); the roles never see prompts or tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SubgoalDraft:
    title: str
    description: str
    executable: bool


@dataclass(frozen=True)
class Split:
    strategy: str
    subgoals: tuple[SubgoalDraft, ...]


@dataclass(frozen=True)
class DecomposeRequest:
    goal: str
    chain: tuple[str, ...]  # titles from the goal down to the node to split
    description: str
    depth: int
    max_depth: int
    strategy: str  # the strategy this decomposer prefers
    taken: tuple[str, ...]  # strategies already proposed for this node
    attempt: int = 1  # 2, 3, ...: this decomposer's earlier drafts were rejected by a quorum
    rejected: tuple[tuple[str, ...], ...] = ()  # the subgoal titles of those rejected drafts


@dataclass(frozen=True)
class ScoreRequest:
    goal: str
    chain: tuple[str, ...]
    strategy: str
    subgoals: tuple[str, ...]


@dataclass(frozen=True)
class Scores:
    clarity: int
    non_overlap: int
    coverage: int
    approve: bool
    reason: str


@dataclass(frozen=True)
class ExecuteRequest:
    goal: str
    chain: tuple[str, ...]  # from the goal down to the leaf
    description: str
    siblings: tuple[str, ...] = ()  # the titles of the other parts of the leaf's parent
    sibling_answers: tuple[str, ...] = ()  # the results those parts already have


class LLMError(RuntimeError):
    """A backend could not answer (model missing, call failed, output unusable)."""


class CallDropped(Exception):
    """The member dropped this call while the model was still answering: the tree no longer
    wants its answer (the node it would split or vote on was decided, the claim it would answer
    was lost). Deliberately not an ``LLMError``: no retry, failure event or back-off may treat
    it as a bad answer. A backend raises it at its next check (a streamed chunk, a retry) once
    the event given to ``PromptedBackend.drop_when`` is set."""


class ModelUnavailable(LLMError):
    """The model cannot be reached at all (its service is down or restarting), as opposed to one bad
    answer: asking again at once is pointless, so a member waits and tries later."""


@runtime_checkable
class Backend(Protocol):
    """A language model as the roles see it. Implementations must be safe to call from a worker thread."""

    name: str  # backend name, e.g. "scripted", "llama"
    model: str  # model name as recorded in plan.json

    def decompose(self, request: DecomposeRequest) -> Split: ...

    def score(self, request: ScoreRequest) -> Scores: ...

    def execute(self, request: ExecuteRequest) -> str: ...

    def latency_s(self, kind: str, key: str) -> float:
        """Seconds this call should appear to take (0 for real backends, which simply take them)."""
        ...

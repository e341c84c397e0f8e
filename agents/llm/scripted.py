"""``scripted``: a deterministic, offline stand-in for a language model, for coordination tests.

It answers from templates, and every answer is a function of the request and the
seed alone (never of a global random source), so a simulation or a test replays
exactly. Its content is plausible but canned: use it to test how the swarm
coordinates, never to judge plan quality (that is what the local model is for).

Splits come in three strategies: ``geography``, ``activity`` and ``day`` (for a
trip to Japan these are Tokyo / Kyoto / Osaka, transport / lodging / food /
sights, and blocks of days; for any other goal, generic equivalents). At depth 1
the first subgoal of a split is marked not executable, so plans have two levels.
Scores follow simple deterministic checks, with a per-scorer strictness drawn
from the seed, so scorers sometimes disagree.
"""

from __future__ import annotations

import hashlib
import random

from agents.llm.base import (
    DecomposeRequest,
    ExecuteRequest,
    ScoreRequest,
    Scores,
    Split,
    SubgoalDraft,
)

STRATEGIES = ("geography", "activity", "day")

_JAPAN = {
    "geography": ["Tokyo", "Kyoto and Nara", "Osaka and Hiroshima", "Hakone and Mount Fuji"],
    "activity": ["Transport", "Lodging", "Food", "Sights"],
    "day": ["Days 1-4", "Days 5-9", "Days 10-14"],
}
_GENERIC = {
    "geography": ["Where it happens", "Who is involved", "What is needed"],
    "activity": ["Research", "Budget", "Schedule", "Logistics"],
    "day": ["First phase", "Middle phase", "Final phase"],
}
_DETAIL = {
    "geography": ["Getting there", "Where to stay", "What to see"],
    "activity": ["Options", "Choice", "Booking"],
    "day": ["Morning", "Afternoon", "Evening"],
}


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class ScriptedBackend:
    """The deterministic stand-in. ``latency`` is the mean seconds per call it reports;
    ``parallel`` the calls a member may wait on at once (a batched server, stood in for)."""

    name = "scripted"
    model = "scripted-v1"

    def __init__(self, seed: int = 0, latency: float = 0.0, strictness: int | None = None, parallel: int = 1) -> None:
        self.seed = seed
        self.latency = latency
        self.parallel = parallel
        # Minimum total score (3..15) this scorer approves; drawn from the seed unless given.
        self.strictness = strictness if strictness is not None else 8 + _rng("strict", seed).randrange(3)

    def decompose(self, request: DecomposeRequest) -> Split:
        strategy = request.strategy
        if strategy in request.taken:
            free = [s for s in STRATEGIES if s not in request.taken]
            strategy = free[0] if free else strategy
        if request.attempt > 1:
            # a redraft after a rejection: the next strategy in turn, and titles marked as a
            # new draft, so the scorers judge something they have not judged before
            strategy = STRATEGIES[(STRATEGIES.index(strategy) + request.attempt - 1) % len(STRATEGIES)] \
                if strategy in STRATEGIES else strategy
        node = request.chain[-1]
        if request.depth == 0:
            table = _JAPAN if "japan" in request.goal.lower() else _GENERIC
            titles = table.get(strategy, _GENERIC["activity"])
        else:
            titles = [f"{node}: {part}" for part in _DETAIL.get(strategy, _DETAIL["activity"])]
        if request.attempt > 1:
            titles = [f"{title} (draft {request.attempt})" for title in titles]
        subgoals = []
        for i, title in enumerate(titles):
            executable = not (request.depth == 0 and i == 0) or request.depth + 1 >= request.max_depth
            subgoals.append(
                SubgoalDraft(
                    title=title[:120],
                    description=f"{title} for: {request.goal}"[:1000],
                    executable=executable,
                )
            )
        return Split(strategy=strategy, subgoals=tuple(subgoals))

    def score(self, request: ScoreRequest) -> Scores:
        titles = [t.strip().lower() for t in request.subgoals]
        distinct = len(set(titles)) == len(titles)
        rng = _rng("score", self.seed, request.strategy, *request.subgoals)
        clarity = 3 + rng.randrange(3)
        non_overlap = 5 if distinct else 1
        coverage = min(5, 2 + len(titles) // 2 + rng.randrange(2))
        total = clarity + non_overlap + coverage
        approve = distinct and 2 <= len(titles) <= 6 and total >= self.strictness
        reason = f"{len(titles)} subgoals, {'distinct' if distinct else 'overlapping'}, total {total}"
        return Scores(clarity, non_overlap, coverage, approve, reason)

    def execute(self, request: ExecuteRequest) -> str:
        rng = _rng("execute", self.seed, *request.chain)
        leaf = request.chain[-1]
        step = rng.choice(["Book", "Decide", "List", "Check", "Arrange"])
        return f"{step}: {leaf}. Done as part of '{request.chain[0]}' (scripted answer {rng.randrange(1000):03d})."

    def latency_s(self, kind: str, key: str) -> float:
        if self.latency <= 0:
            return 0.0
        rng = _rng("latency", self.seed, kind, key)
        return self.latency * (0.5 + rng.random())

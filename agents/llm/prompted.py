"""The prompts and answer handling shared by every real model backend.

A subclass supplies ``_generate(messages, schema, max_tokens) -> text`` (raising
``LLMError`` for a cut-off or failed call); this class asks the three questions,
parses and retries (the error is fed back, at most ``retries`` times), and
combines the model's rubric with the deterministic checks of ``checks.py``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agents.llm.base import (
    CallDropped,
    DecomposeRequest,
    ExecuteRequest,
    LLMError,
    ModelUnavailable,
    ScoreRequest,
    Scores,
    Split,
    SubgoalDraft,
)
from agents.llm.checks import answer_problem, check_split, key_terms, strip_preamble, words

SYSTEM = "You are a careful planning assistant. Be concrete and specific. Never restate the task vaguely."
# No example lists here or in the prompt: a 0.5B model copies them into the plan (every goal, a
# wedding too, came back split into "Transport, Lodging, Food, Bookings" while the hint named those
# four, and "(a place, a booking, a document, a decision)" made "Document Kyoto", "Decision Kyoto").
STRATEGY_HINTS = {
    "geography": "split by the places involved",
    "activity": "split by the different kinds of work the task involves",
    "day": "split by time, in order",
}
_SCORE = {"type": "integer", "enum": [1, 2, 3, 4, 5]}
SPLIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "strategy": {"type": "string", "maxLength": 30},
        "subgoals": {
            "type": "array", "minItems": 2, "maxItems": 6,
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 3, "maxLength": 80},
                    "description": {"type": "string", "maxLength": 140},
                    "executable": {"type": "boolean"},
                },
                "required": ["title", "description", "executable"],
            },
        },
    },
    "required": ["strategy", "subgoals"],
}
SCORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"clarity": _SCORE, "non_overlap": _SCORE, "coverage": _SCORE,
                   "reason": {"type": "string", "maxLength": 160}},
    "required": ["clarity", "non_overlap", "coverage", "reason"],
}



def trim_cut(text: str) -> str:
    """Drop a half-written last sentence or line from an answer that hit its token budget."""
    text = text.strip()
    line = text.rfind("\n")
    if line > len(text) // 2:
        return text[:line].strip()
    sentence = text.rfind(". ")
    return text[: sentence + 1].strip() if sentence > len(text) // 2 else text


class PromptedBackend:
    """Base for real models. Subclasses set ``name``, ``model`` and implement ``_generate``."""

    name = "prompted"
    model = ""
    retries = 2
    parallel = 1  # calls a member may have under way at once (more only where the server batches them)

    def __init__(self) -> None:
        # A member may ask from several threads at once (``parallel``): the totals are kept under a
        # lock, and what one call saw (reached or not, tokens drawn) per thread, for the thread to read.
        self.calls = 0
        self.tokens = 0
        self.seconds = 0.0
        self.vague_retries = 0  # leaf answers asked again because they were vague or off target
        self.vague_answers = 0  # leaf answers that stayed vague after the last try
        self._totals = threading.Lock()
        self._here = threading.local()

    @property
    def unavailable(self) -> str | None:
        """Why this thread's last call could not reach the model at all (None: it was reached)."""
        return getattr(self._here, "unavailable", None)

    def drop_when(self, drop: threading.Event | None) -> None:
        """Calls made on this thread from now on give up (``CallDropped``) once ``drop`` is set:
        before each try, and between the tokens of a streamed answer. None: never. The caller
        sets it back to None after its call: worker threads are reused, and a set event left
        behind would drop the next call made on the thread."""
        self._here.drop = drop

    def _dropped(self) -> bool:
        """True once this thread's call is no longer wanted (``drop_when``)."""
        drop = getattr(self._here, "drop", None)
        return drop is not None and drop.is_set()

    def tokens_here(self) -> int:
        """Tokens drawn so far by calls made on this thread."""
        return getattr(self._here, "tokens", 0)

    def _used(self, tokens: int, seconds: float) -> None:
        """Count one answered call."""
        with self._totals:
            self.calls += 1
            self.tokens += tokens
            self.seconds += seconds
        self._here.tokens = self.tokens_here() + tokens

    def _count_vague(self, retried: bool) -> None:
        with self._totals:
            if retried:
                self.vague_retries += 1
            else:
                self.vague_answers += 1

    def _call(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
              allow_cut: bool = False) -> str:
        """``_generate``, remembering whether the model could be reached (``unavailable``)."""
        self._here.unavailable = None  # reached unless this call says otherwise (a bad answer is still an answer)
        if self._dropped():
            raise CallDropped("dropped before it was sent")
        try:
            return self._generate(messages, schema, max_tokens, allow_cut)
        except ModelUnavailable as exc:
            self._here.unavailable = str(exc)
            raise

    def latency_s(self, kind: str, key: str) -> float:
        return 0.0  # a real model simply takes its time

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        """The answer text. ``finish_reason`` must be "stop", or, with ``allow_cut``, "length"
        (a free-text answer that reached its token budget comes back through ``trim_cut``:
        its unfinished tail dropped, the rest kept; a finished answer is never trimmed)."""
        raise NotImplementedError

    def _json(self, prompt: str, schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        problem = ""
        for _ in range(self.retries + 1):
            try:
                raw = self._call(messages, schema, max_tokens)
                data = json.loads(raw)
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object")
                return data
            except ModelUnavailable:
                raise  # asking again at once cannot help
            except (LLMError, ValueError) as exc:
                problem = str(exc)
                messages = [*messages[:2], {"role": "user", "content":
                            f"{prompt}\n\nYour previous answer was unusable ({problem}). Answer again, "
                            "shorter, as one JSON object."}]
        raise LLMError(f"no usable answer after {self.retries + 1} tries: {problem}")

    # --- the three questions -----------------------------------------------------

    def decompose(self, request: DecomposeRequest) -> Split:
        hint = STRATEGY_HINTS.get(request.strategy, "any clear way of dividing it")
        last_level = request.depth + 1 >= request.max_depth
        prompt = (
            f"Overall goal: {request.goal}\n"
            f"Task to split: {' > '.join(request.chain)}\n"
            + (f"Details: {request.description}\n" if request.description else "")
            + f"\nSplit the task into 3 to 5 subgoals. Strategy \"{request.strategy}\": {hint}.\n"
            + (f"Others already proposed splits by {', '.join(request.taken)}: make yours different.\n"
               if request.taken else "")
            + "".join(f"The scorers rejected your earlier split ({'; '.join(titles)}): propose a clearly "
                      "different and more specific one.\n" for titles in request.rejected)
            + "Do not repeat the task itself as a subgoal: each subgoal is a distinct part of it. "
              "Each subgoal needs a short specific title that names something concrete in this task, "
              "a one-sentence description, and \"executable\": true if one person "
              "can do it in one sitting without more planning."
            + (" All subgoals must be executable." if last_level else "")
        )
        data = self._json(prompt, SPLIT_SCHEMA, max_tokens=400)
        # The model's own word on executable stands. Overriding it from the title (checks.needs_planning)
        # was tried and measured: the 0.5B model's splits below the first level repeat their parent and
        # siblings ("Develop the project architecture" under "Develop the project components"), and a
        # plan took 515 s instead of 110 for 18 such leaves. make quality counts the broad leaves instead.
        drafts = tuple(
            SubgoalDraft(title, str(s["description"]).strip()[:1000], bool(s["executable"]) or last_level)
            for s in data["subgoals"] if (title := str(s["title"]).strip()[:120])
        )
        # A subgoal that only restates the task (no key term the task lacks: "Plan a two-week trip
        # to Japan" as a part of itself, seen in make swarm despite the prompt) is no part of it:
        # dropped here rather than left to the scorers, whose best-draft fallback accepts it. Only
        # where two others remain: a task that names its parts ("Book flights and hotels") is split
        # into titles made of its own words, and a draft for the scorers beats no draft at all.
        # Then a title that repeats an earlier one's words is dropped, on the same terms.
        task = key_terms(" ".join(request.chain[-1:]) or request.goal)
        fresh = tuple(d for d in drafts if key_terms(d.title) - task)
        subgoals = fresh if len(fresh) >= 2 else drafts
        distinct: dict[frozenset[str], SubgoalDraft] = {}
        for draft in subgoals:
            distinct.setdefault(frozenset(words(draft.title)), draft)
        subgoals = tuple(distinct.values()) if len(distinct) >= 2 else subgoals
        if len(subgoals) < 2:
            raise LLMError("the model proposed fewer than 2 usable subgoals")
        return Split(str(data.get("strategy") or request.strategy).strip()[:40] or request.strategy, subgoals)

    def score(self, request: ScoreRequest) -> Scores:
        listing = "\n".join(f"- {title}" for title in request.subgoals)
        prompt = (
            f"Overall goal: {request.goal}\nTask: {' > '.join(request.chain)}\n"
            f"Proposed split ({request.strategy}):\n{listing}\n\n"
            "Score the split from 1 (bad) to 5 (excellent): clarity (is each subgoal concrete and actionable?), "
            "non_overlap (do subgoals avoid repeating each other?), coverage (together, do they cover the task?). "
            "Give a short reason."
        )
        data = self._json(prompt, SCORE_SCHEMA, max_tokens=120)
        report = check_split(" ".join(request.chain[-1:]) or request.goal, [(t, "") for t in request.subgoals])
        clarity = min(int(data["clarity"]), report.clarity)
        non_overlap = min(int(data["non_overlap"]), report.non_overlap)
        coverage = round((int(data["coverage"]) + report.coverage_score) / 2)
        approve = report.passes and min(clarity, non_overlap) >= 3 and coverage >= 2
        reason = f"model: {str(data.get('reason', ''))[:160]} | checks: {report.explain()}"
        return Scores(clarity, non_overlap, coverage, approve, reason)

    def execute(self, request: ExecuteRequest) -> str:
        """The leaf's answer. One that restates the task, answers a sibling or repeats a sibling's
        answer (``checks.answer_problem``) is asked again, once, with the problem named; then
        that answer stands (``vague_answers`` counts it if it is still vague), since a failure
        would only hand the same question to another executor. Once, because more did not
        help: with two retries, 12 of 30 leaves of ``make quality`` stayed vague."""
        # The siblings are checked against, not named in the prompt: measured on 12 leaves, naming
        # them ("other people handle ...") doubled the vague answers (6 against 3); the 0.5B model
        # echoes what the prompt lists.
        prompt = (
            f"Overall goal: {request.goal}\nYour task: {' > '.join(request.chain)}\n"
            + (f"Details: {request.description}\n" if request.description else "")
            + "Do the task: give the concrete result in at most 4 short sentences or a short list "
              "(names, numbers, steps). No preamble, no greeting.")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        problem, answer, asked_again = "", "", False
        for _ in range(self.retries + 1):
            try:
                answer = strip_preamble(self._call(messages, None, max_tokens=180, allow_cut=True))
            except ModelUnavailable:
                raise
            except LLMError as exc:
                problem = str(exc)
                continue
            if not answer:
                problem = "empty answer"
                continue
            problem = answer_problem(answer, request.chain, request.siblings, request.sibling_answers) or ""
            if not problem:
                return answer
            if asked_again:
                break
            asked_again = True
            self._count_vague(retried=True)
            messages = [*messages[:2], {"role": "assistant", "content": answer},
                        {"role": "user", "content": f"That answer is not usable: {problem}. Answer your part "
                                                    "again, with concrete names, figures or steps."}]
        if answer:
            self._count_vague(retried=False)
            return answer
        raise LLMError(f"no usable answer after {self.retries + 1} tries: {problem}")

"""Deterministic checks of a proposed split, the part of scoring a 0.5B model cannot be trusted with.

Measured (LLM.md): no small local model told "Go to Japan / Do things in
Japan" from a real split. These checks do, from the text alone:

* **count**: 2 to 6 subgoals;
* **duplicates**: two subgoals with the same normalised title;
* **overlap**: the highest word overlap (Jaccard) between two subgoals;
* **coverage**: how many of the parent's key terms the subgoals mention;
* **specificity**: how much each subgoal adds beyond restating the parent
  (words not in the parent, not stop words, not filler like "things", "stuff").

Each becomes a 1-5 score; ``SplitReport.passes`` is the gate a split must clear
to be approved, whatever the model said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations

STOP = frozenset(["a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "at", "by", "from", "into", "about", "as", "is", "are", "be", "do", "does", "did", "make", "plan", "get", "go", "things", "thing", "stuff", "other", "others", "misc", "miscellaneous", "various", "general", "etc", "it", "its", "this", "that", "some", "all", "any", "each", "part", "parts", "step", "steps", "task", "tasks", "item", "items", "phase", "first", "second", "third", "final", "one", "two", "three", "up", "out", "off", "over", "under", "your", "our", "my", "their", "we", "you", "i", "me", "us", "them"])
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")


def words(text: str) -> set[str]:
    return {w.strip("'-") for w in _WORD.findall(text.lower())} - {""}


def key_terms(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOP and len(w) > 2}


@dataclass(frozen=True)
class SplitReport:
    count_ok: bool
    duplicates: int
    max_overlap: float  # 0..1
    coverage: float  # 0..1 of the parent's key terms mentioned
    specificity: float  # 0..1, mean share of new key terms per subgoal
    vague: int = 0  # subgoals that add no key term to the parent's (they restate it)

    @property
    def clarity(self) -> int:
        return _scale(self.specificity, (0.15, 0.3, 0.45, 0.6))

    @property
    def non_overlap(self) -> int:
        return 1 if self.duplicates else _scale(1 - self.max_overlap, (0.3, 0.5, 0.7, 0.85))

    @property
    def coverage_score(self) -> int:
        return _scale(self.coverage, (0.2, 0.4, 0.6, 0.8))

    @property
    def passes(self) -> bool:
        return (self.count_ok and not self.duplicates and not self.vague and self.max_overlap < 0.6
                and self.specificity >= 0.3)

    def explain(self) -> str:
        return (f"{'count ok' if self.count_ok else 'bad count'}, {self.duplicates} duplicate(s), {self.vague} vague, "
                f"overlap {self.max_overlap:.2f}, coverage {self.coverage:.2f}, specificity {self.specificity:.2f}")


def _scale(value: float, steps: tuple[float, float, float, float]) -> int:
    return 1 + sum(1 for step in steps if value >= step)


def check_split(parent: str, subgoals: list[tuple[str, str]]) -> SplitReport:
    """``parent`` is the text of the node being split; ``subgoals`` are (title, description)."""
    titles = [" ".join(sorted(words(t))) for t, _ in subgoals]
    duplicates = len(titles) - len(set(titles))
    texts = [key_terms(f"{t} {d}") for t, d in subgoals]
    overlaps = [len(a & b) / len(a | b) for a, b in combinations(texts, 2) if a | b]
    parent_terms = key_terms(parent)
    mentioned = set().union(*texts) if texts else set()
    coverage = len(parent_terms & mentioned) / len(parent_terms) if parent_terms else 1.0
    fresh = [len(key_terms(t) - parent_terms) / max(1, len(words(t))) for t, _ in subgoals]
    specificity = sum(fresh) / len(fresh) if fresh else 0.0
    vague = sum(1 for share in fresh if share == 0)
    return SplitReport(2 <= len(subgoals) <= 6, duplicates, max(overlaps, default=0.0), coverage, specificity, vague)

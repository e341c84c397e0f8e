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


# --- a subgoal that still needs planning, and an answer that says nothing new ---------------

# A title that opens with one of these names a whole area of work, not one answerable thing:
# "Plan the itinerary", "Organise transport", "Manage the budget and bookings".
BROAD_VERBS = frozenset(["plan", "planning", "organise", "organize", "organising", "organizing", "arrange",
                         "arranging", "manage", "managing", "coordinate", "coordinating", "handle", "prepare",
                         "preparing", "oversee", "research and plan", "develop", "execute"])
# The openings a chat model puts before an answer: an interjection ("Certainly!") and a line that
# only announces what follows ("Here's a concrete plan for the trip:").
_PREAMBLE = (re.compile(r"^\s*(certainly|sure|of course|absolutely)\s*[!.,]\s*", re.IGNORECASE),
             re.compile(r"^\s*(here is|here's|here are)\b[^\n:]{0,120}:\s*", re.IGNORECASE))


def needs_planning(title: str) -> str | None:
    """Why the subgoal ``title`` still needs a plan of its own rather than one answer, or None.

    Judged from its text alone: it opens with a broad verb ("plan", "organise", ...), or
    it joins two pieces of work that each need words of their own ("book flights to Tokyo
    and reserve hotels in Kyoto"; not "salt and pepper" or "a date and time")."""
    lowered = " ".join(_WORD.findall(title.lower()))
    for verb in BROAD_VERBS:
        if lowered == verb or lowered.startswith(verb + " "):
            return f"'{title}' opens with '{verb}': a whole area of work"
    left, joined, right = lowered.partition(" and ")
    if joined and len(key_terms(left)) >= 2 and len(key_terms(right)) >= 2:
        return f"'{title}' joins several pieces of work"
    return None


def strip_preamble(answer: str) -> str:
    """The answer without a chatty opening line ("Certainly! Here's a plan for ...:")."""
    stripped = answer.strip()
    for opening in _PREAMBLE:  # "Certainly! Here's ...:" is both, in this order
        stripped = opening.sub("", stripped, count=1).strip()
    return stripped or answer.strip()


_SPECIFIC = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-zA-Z0-9'-]+|\d+", re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+\S", re.MULTILINE)


def specifics(answer: str, task_terms: set[str]) -> int:
    """Names and numbers in ``answer`` that the task did not already say (capitalised words
    inside a sentence, and figures): what a concrete answer has and a restatement lacks."""
    return sum(1 for word in _SPECIFIC.findall(answer) if word.lower() not in task_terms)


# Words that carry no content of their own in an answer: "you would need to choose a convenient ..."
FILLER = frozenset(["would", "need", "needs", "then", "should", "could", "can", "will", "also", "make", "sure",
                    "consider", "choose", "select", "decide", "ensure", "important", "good", "best", "great",
                    "comfortable", "convenient", "suitable", "appropriate", "option", "options", "way", "ways",
                    "well", "able", "like", "use", "using", "based"])


def answer_problem(answer: str, chain: tuple[str, ...], siblings: tuple[str, ...] = (),
                   sibling_answers: tuple[str, ...] = ()) -> str | None:
    """Why a leaf's ``answer`` says nothing specific to its leaf, or None if it does.

    ``chain`` runs from the goal down to the leaf; ``siblings`` are the other parts of the
    same parent, answered separately, and ``sibling_answers`` the answers they already
    have. An answer is vague when its key terms are nearly all the goal's and the leaf's
    own words, or it names nothing and counts nothing (it restates the task); off target
    when it speaks of a sibling's subject and never of its own leaf's, or nearly repeats a
    sibling's answer."""
    terms = key_terms(answer)
    if len(terms) < 4:
        return "the answer is too short to be concrete"
    task_terms = set().union(*(key_terms(title) for title in chain)) if chain else set()
    fresh = terms - task_terms - FILLER
    listed = len(_LIST_ITEM.findall(answer))
    share = len(fresh) / len(terms)
    # a restatement says little beyond the task's words, and names and counts nothing; a concrete
    # answer in plain words ("order a chocolate sponge cake from the local bakery") says much that is new
    if len(fresh) < 4 or share < 0.4 or (specifics(answer, task_terms) == 0 and listed < 3 and share < 0.75):
        return "the answer restates the task instead of answering it (names, numbers, choices are missing)"
    own = key_terms(chain[-1]) - key_terms(" ".join(chain[:-1])) if chain else set()
    for sibling in siblings:
        theirs = key_terms(sibling) - task_terms
        if own and theirs and not (own & terms) and len(theirs & terms) >= max(1, len(theirs) // 2 + 1):
            return f"the answer is about '{sibling}', another part, not about '{chain[-1]}'"
    if duplicate_answers([*sibling_answers, answer]) > duplicate_answers(list(sibling_answers)):
        return "the answer nearly repeats the answer of another part"
    return None


def duplicate_answers(answers: list[str], threshold: float = 0.6) -> int:
    """How many answers nearly repeat an earlier one (word Jaccard >= ``threshold``)."""
    seen: list[set[str]] = []
    duplicates = 0
    for answer in answers:
        terms = key_terms(answer)
        if any(terms and len(terms & other) / len(terms | other) >= threshold for other in seen):
            duplicates += 1
        seen.append(terms)
    return duplicates

"""Rounds: how the roster's ballots accept one value for a node (PROTOCOL.md, section 5).

The value is a split (a proposal) for an inner node and a result for a leaf: one
mechanism decides both. A node runs numbered rounds. Round ``r`` has one coordinator (by arithmetic on
the roster), who names a *candidate* draft; each roster scorer has one ballot
per round; a value is accepted when ``quorum`` scorers' counted ballots in
one round approve it. Entering a later round (a *promise*) is a scorer's
promise never to ballot in an earlier one, and it reports, through the
scorer's own chain, the last value the scorer approved. A later round's
candidate must be the value reported at the highest round among the
``quorum`` promises it cites (Paxos's rule, with no leader), so once a quorum
has accepted a value, no later round can accept another.

Nothing here reads a timestamp. Validity is three-valued: a candidate whose
justification names events this member does not hold yet is *undetermined*,
and becomes valid or invalid once they arrive, never changing after. That is
what makes acceptance monotone: more events can add ballots that count, never
take one away.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agents.core.branches import Branches
from agents.core.events import BallotBody, CandidateBody, Event, PromiseBody
from agents.core.tree import Goal, PromiseView, RoundView

Validity = Literal["valid", "invalid", "undetermined"]


@dataclass(frozen=True)
class _Ballot:
    event: Event
    scorer: str
    round: int
    candidate: str
    approve: bool


@dataclass(frozen=True)
class _Promise:
    event: Event
    scorer: str
    round: int
    approved_before: tuple[_Ballot, ...]  # the scorer's approving round ballots earlier on its chain


@dataclass
class NodeRounds:
    """What the rounds of one node decided."""

    accepted: tuple[str, int, tuple[str, ...]] | None = None  # (value, round, approving scorers)
    rounds: dict[int, RoundView] = field(default_factory=dict)
    entered: dict[str, int] = field(default_factory=dict)
    promises: dict[int, tuple[PromiseView, ...]] = field(default_factory=dict)
    certificates: dict[tuple[int, str], tuple[tuple[str, str], ...]] = field(default_factory=dict)
    breach: str = ""  # two values accepted: more equivocators than the quorum tolerates


def _walk_chains(chains_by_scorer: Mapping[str, Branches]
                 ) -> tuple[dict[str, _Ballot], dict[str, _Promise], dict[str, int]]:
    """Round ballots and counted promises, read along each scorer's chains (one walk of its
    ``Branches``, undoing what a branch it leaves had read)."""
    ballots: dict[str, _Ballot] = {}
    promises: dict[str, _Promise] = {}
    entered: dict[str, int] = {}
    for scorer, branches in chains_by_scorer.items():
        current = highest = 1
        balloted: set[int] = set()
        approved: list[_Ballot] = []
        undo: list[tuple[int, int | None, bool]] = []  # per event on this chain: current before it, what it added
        forked = branches.forked
        for depth, event in branches.steps():
            while len(undo) > depth:
                current, added, grew = undo.pop()
                if added is not None:
                    balloted.discard(added)
                if grew:
                    approved.pop()
            before, added, grew = current, None, False
            body = event.body
            if isinstance(body, PromiseBody):
                if body.round > current:
                    promises[event.id] = _Promise(event, scorer, body.round, tuple(approved))
                    current = body.round
            elif isinstance(body, BallotBody) and body.round not in balloted:
                balloted.add(body.round)
                added = body.round
                if body.round >= current:
                    ballot = _Ballot(event, scorer, body.round, body.candidate, body.approve)
                    ballots[event.id] = ballot
                    if body.approve:
                        approved.append(ballot)
                        grew = True
                current = max(current, body.round)
            if forked:
                undo.append((before, added, grew))
            highest = max(highest, current)
        entered[scorer] = highest
    return ballots, promises, entered


def settle(goal: Goal, node: str, drafts: Mapping[str, bool | None], candidates: Sequence[Event],
           firsts: Container[str], chains_by_scorer: Mapping[str, Branches], held: Mapping[str, Event]) -> NodeRounds:
    """Decide one node's rounds.

    ``drafts`` maps every held value on this node to whether it may be named: a
    proposal within its author's first three on an inner node; on a leaf, a result
    by the author of a granted claim (None: not yet, its claim may still be granted);
    ``candidates`` are the held candidate events
    on this node by roster scorers; ``firsts`` holds (at least) those that are their
    author's first for their round on their own chain (``FoldIndex.first_candidates``): a
    coordinator names one value per round, and a second one on the same chain (no fork, so
    no equivocation to see) would split the round's ballots for good; ``chains_by_scorer`` holds each roster scorer's
    promises and ballots on this node, along its chains (``branches.Branches``);
    ``held`` is every event in the member's feeds, by id.
    """
    quorum = goal.quorum
    ballots, promises, entered = _walk_chains(chains_by_scorer)
    status: dict[str, Validity] = {}
    value_of: dict[str, str] = {}
    forced: dict[str, bool] = {}

    def candidate_status(candidate_id: str, round_: int) -> Validity:
        event = held.get(candidate_id)
        if event is None:
            return "undetermined"
        body = event.body
        if not isinstance(body, CandidateBody) or body.node != node or body.round != round_:
            return "invalid"
        return status.get(candidate_id, "invalid")  # absent: not by a roster scorer

    def report(promise: _Promise) -> tuple[Validity, _Ballot | None]:
        best: _Ballot | None = None
        for ballot in promise.approved_before:
            seen = candidate_status(ballot.candidate, ballot.round)
            if seen == "undetermined":
                return "undetermined", None
            if seen == "valid" and (best is None or ballot.round > best.round):
                best = ballot
        return "valid", best

    def judge(event: Event) -> Validity:
        body = event.body
        assert isinstance(body, CandidateBody)
        if event.author != goal.coordinator(node, body.round) or event.id not in firsts:
            return "invalid"
        if body.value not in held:
            return "undetermined"
        eligible = drafts.get(body.value, False)
        if eligible is None:
            return "undetermined"
        if not eligible:
            return "invalid"
        value_of[event.id] = body.value
        if body.round == 1:
            return "valid" if not body.promises and not body.certificate else "invalid"
        if len(set(body.promises)) != len(body.promises) or len(body.promises) < quorum:
            return "invalid"
        cited: list[_Promise] = []
        missing = False
        for promise_id in body.promises:
            if promise_id not in held:
                missing = True
                continue
            promise = promises.get(promise_id)
            if promise is None or promise.round != body.round:
                return "invalid"
            cited.append(promise)
        if len({p.scorer for p in cited}) != len(cited):
            return "invalid"
        if missing:
            return "undetermined"
        reports: list[_Ballot] = []
        for promise in cited:
            seen, best = report(promise)
            if seen == "undetermined":
                return "undetermined"
            if best is not None:
                reports.append(best)
        if not reports:
            return "valid"  # a free round: the coordinator picks any draft
        forced[event.id] = True
        top = max(b.round for b in reports)
        values = {value_of.get(b.candidate) for b in reports if b.round == top}
        if body.value not in values:
            return "invalid"
        if len(values) == 1:
            return "valid"
        # the round-top coordinator equivocated: only a certified value may be carried over
        if len(set(body.certificate)) != len(body.certificate):
            return "invalid"
        certifiers: set[str] = set()
        for ballot_id in body.certificate:
            if ballot_id not in held:
                return "undetermined"
            ballot = ballots.get(ballot_id)
            if ballot is None or ballot.round != top:
                return "invalid"
            seen = candidate_status(ballot.candidate, top)
            if seen != "valid":
                return seen
            if value_of.get(ballot.candidate) != body.value:
                return "invalid"
            certifiers.add(ballot.scorer)
        return "valid" if len(certifiers) >= quorum else "invalid"

    for event in sorted(candidates, key=lambda e: (e.body.round, e.id)):  # type: ignore[union-attr]
        status[event.id] = "undetermined"  # known as a candidate of this node while judged
        status[event.id] = judge(event)

    outcome = NodeRounds(entered=dict(sorted(entered.items())))
    # every counted ballot counts, an equivocator's in both its branches: approvals and
    # rejections are sets per (round, value), never one verdict per scorer that a later
    # branch could overwrite (which would take an approval back)
    approving: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    rejecting: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    certificates: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
    for ballot in sorted(ballots.values(), key=lambda b: b.event.id):
        if candidate_status(ballot.candidate, ballot.round) == "valid":
            value = value_of[ballot.candidate]
            (approving if ballot.approve else rejecting)[ballot.round][value].add(ballot.scorer)
            certificates[(ballot.round, value)].append((ballot.event.id, ballot.scorer))
    outcome.certificates = {k: tuple(v) for k, v in sorted(certificates.items())}
    promised: dict[int, set[str]] = defaultdict(set)
    views: dict[int, list[PromiseView]] = defaultdict(list)
    for promise in sorted(promises.values(), key=lambda p: p.event.id):
        promised[promise.round].add(promise.scorer)
        seen, best = report(promise)
        views[promise.round].append(PromiseView(
            promise.event.id, promise.scorer, promise.round, best.round if best else None,
            value_of.get(best.candidate) if best else None, seen == "valid"))
    outcome.promises = {r: tuple(v) for r, v in sorted(views.items())}
    valid_by_round: dict[int, list[Event]] = defaultdict(list)
    for event in candidates:
        if status[event.id] == "valid":
            valid_by_round[event.body.round].append(event)  # type: ignore[union-attr]

    accepted: list[tuple[int, str, tuple[str, ...]]] = []
    for round_ in sorted(set(approving) | set(rejecting) | set(promised) | set(valid_by_round)):
        named = sorted(valid_by_round.get(round_, []), key=lambda e: e.id)
        first = named[0] if named else None
        value = value_of[first.id] if first else None
        outcome.rounds[round_] = RoundView(
            node, round_, goal.coordinator(node, round_), first.id if first else None, value,
            bool(first and forced.get(first.id)),
            tuple(sorted(approving[round_][value])) if value else (),
            tuple(sorted(rejecting[round_][value])) if value else (),
            tuple(sorted(promised.get(round_, ()))),
        )
        for ballot_value, approvers in sorted(approving.get(round_, {}).items()):
            if len(approvers) >= quorum:
                accepted.append((round_, ballot_value, tuple(sorted(approvers))))
    if accepted:
        round_, value, approvers = accepted[0]
        outcome.accepted = (value, round_, approvers)
        others = sorted({v for _, v, _ in accepted} - {value})
        if others:
            outcome.breach = (f"node {node[:8]}: values {value[:8]} and {others[0][:8]} both gathered a quorum; "
                              f"more scorers equivocated than a quorum of {quorum} of {len(goal.scorers)} tolerates")
    return outcome

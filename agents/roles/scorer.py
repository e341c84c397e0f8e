"""Scorer: the editorial board. Assess drafts, run the rounds of every open node and leaf,
and grant claims (PROTOCOL.md, sections 5-8).

Per open node, in the scorer's current round ``r``:

* as the round's coordinator, name a candidate: in a forced round the proposal
  the cited promises carry over; otherwise its best approved draft, and from
  round ``FALLBACK_ROUND`` on its best-scored draft even if it approved none
  (so a node whose every draft was rejected still gets a split);
* ballot once on the round's valid candidate: approve when its own assessment
  approved it, when the round is forced, or from ``FALLBACK_ROUND`` on;
* move to round ``r + 1`` (a promise) when the candidate has more rejections
  than a quorum can survive, or, once a quorum of scorers is in round ``r``,
  when ``round_ms`` has passed since it balloted (a voter may be gone) or since
  it entered the round without a candidate (the coordinator may be gone); and
  join a later round once ``f + 1`` other scorers are in it (``f`` tolerated
  equivocators: one alone cannot drag the board). A scorer alone ahead waits
  for the others instead of racing on.

Assessments (model calls) go to the current candidates first, then to drafts
one per author in turn by draft number: a flood of drafts from one author
waits behind every other author's.

Per leaf: ack the first pending claim of a later epoch once the holder is gone
(failed, silent for a lease, or past the hold limit without a result), and run
the leaf's rounds like a node's, over the eligible results (the holder's
latest first), approving any eligible result: a result's content is not judged.
Everything is read from the tree and the clock reading, so a restart never acts
twice.
"""

from __future__ import annotations

from collections.abc import Callable

from agents.core.clock import Timestamp
from agents.core.events import MAX_ROUND
from agents.core.tree import Goal, Node, PlanTree, PromiseView
from agents.roles.intents import Ack, Ballot, Candidate, Intent, Me, Promise, Vote

FALLBACK_ROUND = 3
MAX_EPOCH_STEP = 4  # a claim more epochs past the last we acked (or the holder's) is not acked


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    acts: list[Intent] = []
    candidates: list[Intent] = []
    drafts: list[Intent] = []
    for node in tree.walk():
        goal = tree.goal_of(node)
        if me.peer_id not in goal.scorers or node.status == "done":
            continue
        if node.leaf:
            acts.extend(_acks(tree, goal, node, me, now_ms))
            results = tree.eligible_results(node.id)
            if results:
                _rounds(tree, goal, node.id, me, now_ms, acts, candidates, lambda _value: True,
                        lambda _round, results=results: results[0].id, min(r.at for r in results))
        elif node.status == "open":
            pool = tree.drafts(node.id)
            _rounds(tree, goal, node.id, me, now_ms, acts, candidates,
                    lambda value: _judged(tree, value, me),
                    lambda round_, node=node: _free(tree, node, round_, me),
                    min((p.at for p in pool), default=None))
            drafts.extend(Vote(d.id) for d in pool if me.peer_id not in tree.voters.get(d.id, frozenset()))
    # the member runs one model call at a time, the first intent of that kind it has not done
    return acts + candidates + _round_robin(drafts, tree)


def _judged(tree: PlanTree, proposal_id: str, me: Me) -> bool | None:
    """This scorer's verdict on a draft: None until it has assessed it (a model call)."""
    if me.peer_id not in tree.voters.get(proposal_id, frozenset()):
        return None
    return me.peer_id in tree.proposals[proposal_id].approvals


def _round_robin(votes: list[Vote], tree: PlanTree) -> list[Intent]:
    def order(intent: Vote) -> tuple[int, str, str]:
        proposal = tree.proposals[intent.proposal]
        return (proposal.draft_number, proposal.author, proposal.id)

    return sorted(votes, key=order)  # type: ignore[return-value]


def _rounds(tree: PlanTree, goal: Goal, target: str, me: Me, now_ms: int, acts: list[Intent],
            candidates: list[Intent], judge: Callable[[str], bool | None],
            free: Callable[[int], str | None], first_value_at: Timestamp | None) -> None:
    """One scorer's part in the rounds of one node or leaf (see the module docstring)."""
    n, quorum = len(goal.scorers), goal.quorum
    entered = tree.entered.get(target, {})
    current = entered.get(me.peer_id, 1)
    done = tree.acts.get((target, me.peer_id), {})
    view = tree.rounds.get((target, current))
    others = sorted((r for s, r in entered.items() if s != me.peer_id and r > current), reverse=True)
    target_round = others[goal.tolerated_equivocators] if len(others) > goal.tolerated_equivocators else current

    if (target_round == current and ("candidate", current) not in done
            and goal.coordinator(target, current) == me.peer_id):
        named = _choose(tree, goal, target, current, free)
        if named is not None:
            acts.append(named)
    if target_round == current and view is not None and view.candidate is not None \
            and view.value is not None and ("ballot", current) not in done:
        verdict = True if view.forced or current >= FALLBACK_ROUND else judge(view.value)
        if verdict is None:
            candidates.append(Vote(view.value))
        else:
            acts.append(Ballot(target, current, view.candidate, verdict))

    # a round times out only once a quorum is in it: a scorer alone ahead would otherwise
    # keep moving on and the others, one round behind, would never meet it in one round
    present = sum(1 for r in entered.values() if r >= current) + (me.peer_id not in entered)
    timed_out = current == 1 or present >= quorum  # everyone starts in round 1
    if view is not None and view.candidate is not None:
        balloted = done.get(("ballot", current))
        over = balloted is not None and (len(view.rejections) > n - quorum
                                         or (timed_out and now_ms - balloted.ms >= goal.round_ms))
    else:
        entry = done.get(("promise", current)) if current > 1 else first_value_at
        over = timed_out and entry is not None and now_ms - entry.ms >= goal.round_ms
    if over:
        target_round = max(target_round, current + 1)
    if current < target_round <= MAX_ROUND:
        acts.append(Promise(target, target_round))


def _choose(tree: PlanTree, goal: Goal, target: str, round_: int,
            free: Callable[[int], str | None]) -> Candidate | None:
    """The candidate this coordinator names for ``round_``, or None while it cannot yet."""
    if round_ == 1:
        value = free(round_)
        return Candidate(target, round_, value) if value else None
    chosen: dict[str, PromiseView] = {}
    for promise in tree.promises.get((target, round_), ()):
        if promise.determined and promise.scorer not in chosen:
            chosen[promise.scorer] = promise
    if len(chosen) < goal.quorum:
        return None
    cited = sorted(chosen.values(), key=lambda p: p.id)
    ids = tuple(p.id for p in cited)
    reports = [(p.report_round, p.report_value) for p in cited if p.report_round is not None]
    if not reports:
        value = free(round_)
        return Candidate(target, round_, value, ids) if value else None
    top = max(r for r, _ in reports)
    values = sorted({v for r, v in reports if r == top and v is not None})
    if len(values) == 1:
        return Candidate(target, round_, values[0], ids)
    for value in values:  # an equivocating coordinator at ``top``: carry over the certified one
        by_scorer: dict[str, str] = {}
        for ballot_id, scorer in tree.certificates.get((target, top, value), ()):
            by_scorer.setdefault(scorer, ballot_id)  # one ballot per scorer (a fork has two)
        if len(by_scorer) >= goal.quorum:
            return Candidate(target, round_, value, ids, tuple(sorted(by_scorer.values())))
    return None


def _free(tree: PlanTree, node: Node, round_: int, me: Me) -> str | None:
    """A free round's choice on an inner node: the best draft this scorer approved; from
    ``FALLBACK_ROUND`` on, the best-scored draft even if it approved none."""
    drafts = tree.drafts(node.id)
    approved = [d for d in drafts if me.peer_id in d.approvals]
    pool = approved or (drafts if round_ >= FALLBACK_ROUND else [])
    if not pool:
        return None
    return max(pool, key=lambda d: (d.score, -d.draft_number, d.id)).id


def being_taken(tree: PlanTree, leaf: Node, now_ms: int, but: str = "") -> bool:
    """A claim of a later epoch than the holder's, younger than a lease, is still gathering
    its acks (``but``: ignore this executor's own claims)."""
    lease = tree.goal_of(leaf).claim_lease_ms
    return any(not c.granted and c.epoch > leaf.epoch and c.executor != but and now_ms - c.at.ms < lease
               for c in tree.claims_on(leaf.id))


def holder_gone(tree: PlanTree, leaf: Node, now_ms: int) -> bool:
    """Whether the leaf's holder has given it up by this member's clock: none, failed, silent
    for a lease, or holding past the goal's limit without a result waiting to be accepted."""
    if leaf.claim is None or leaf.status != "claimed":
        return True
    goal = tree.goal_of(leaf)
    answered = any(r.claim == leaf.claim for r in tree.eligible_results(leaf.id))
    if answered:
        return False
    silent = leaf.heartbeat is not None and now_ms - leaf.heartbeat.ms >= goal.claim_lease_ms
    too_long = now_ms - tree.claims[leaf.claim].at.ms >= goal.hold_limit_ms
    return leaf.holder_failed or silent or too_long


def _acks(tree: PlanTree, goal: Goal, leaf: Node, me: Me, now_ms: int) -> list[Intent]:
    """Ack the first pending claim of a later epoch once the holder is gone; after acking one,
    give it a lease to gather the others' acks before acking a later epoch."""
    acked = tree.acked.get((leaf.id, me.peer_id), 0)
    holder = tree.claims.get(leaf.claim) if leaf.claim is not None and leaf.status == "claimed" else None
    if not holder_gone(tree, leaf, now_ms):
        return []
    floor = max(acked, holder.epoch if holder is not None else 0)
    mine = [c for c in tree.claims_on(leaf.id)
            if c.epoch == acked > (holder.epoch if holder is not None else 0) and not c.granted]
    if any(now_ms - c.at.ms < goal.claim_lease_ms for c in mine):
        return []  # the claim we acked may still be granted
    # a few epochs past our own floor (a stranger's claim at an absurd epoch moves nothing), not
    # past the holder's: after a partition every scorer may have acked several ungranted epochs
    ceiling = floor + MAX_EPOCH_STEP
    pending = [c for c in tree.claims_on(leaf.id) if floor < c.epoch <= ceiling and not c.granted]
    if not pending:
        return []
    # within an epoch, anyone but the holder that just lost the leaf first (a holder that hogs a
    # leaf and never answers must not win it straight back with a claim it signed in advance)
    previous = holder.executor if holder is not None else None
    first = min(pending, key=lambda c: (c.epoch, c.executor == previous, c.at, c.id))
    return [Ack(leaf.id, first.id, first.epoch)]

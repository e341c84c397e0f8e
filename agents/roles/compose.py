"""Turn an intent into an event body, asking the model where the intent needs one.

This is the only place where a role meets its language model. A model that
fails on an ``Execute`` produces a ``FailureBody`` (the leaf is handed back),
never a guessed result; a model that fails on a proposal or a vote produces
nothing, and the policy will ask again.
"""

from __future__ import annotations

from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    FailureBody,
    PromiseBody,
    ProposalBody,
    RenewBody,
    ResultBody,
    Subgoal,
    VoteBody,
)
from agents.core.tree import Node, PlanTree
from agents.llm.base import Backend, DecomposeRequest, ExecuteRequest, LLMError, ScoreRequest
from agents.roles.intents import (
    Ack,
    Ballot,
    Candidate,
    Claim,
    Execute,
    Intent,
    Me,
    Promise,
    Propose,
    Renew,
    Vote,
)

EventBody = (ProposalBody | VoteBody | PromiseBody | CandidateBody | BallotBody | ClaimBody | AckBody | RenewBody
             | ResultBody | FailureBody)


def _model_tag(backend: Backend) -> str:
    return f"{backend.name}:{backend.model}"[:120]


def chain_of(tree: PlanTree, node: Node) -> tuple[str, ...]:
    titles = [node.title]
    while node.parent is not None:
        node = tree.nodes[node.parent]
        titles.append(node.title)
    return tuple(reversed(titles))


def latency_key(intent: Intent) -> tuple[str, str]:
    """(kind, key) for ``Backend.latency_s``: how long the model call of this intent takes."""
    match intent:
        case Propose(node=node):
            return "decompose", node
        case Vote(proposal=proposal):
            return "score", proposal
        case Execute(leaf=leaf):
            return "execute", leaf
        case _:
            return "none", ""


def compose(intent: Intent, tree: PlanTree, backend: Backend, me: Me) -> EventBody | None:
    """The event body that carries ``intent`` out, or None if there is nothing to send."""
    match intent:
        case Claim(leaf=leaf, epoch=epoch):
            return ClaimBody(leaf=leaf, epoch=epoch)
        case Renew(claim=claim):
            return RenewBody(claim=claim)
        case Promise(node=node_id, round=round_):
            return PromiseBody(node=node_id, round=round_)
        case Candidate(node=node_id, round=round_, value=value, promises=promises, certificate=cert):
            return CandidateBody(node=node_id, round=round_, value=value, promises=promises, certificate=cert)
        case Ballot(node=node_id, round=round_, candidate=candidate, approve=approve):
            return BallotBody(node=node_id, round=round_, candidate=candidate, approve=approve)
        case Ack(leaf=leaf, claim=claim, epoch=epoch):
            return AckBody(leaf=leaf, claim=claim, epoch=epoch)
        case Propose(node=node_id, attempt=attempt):
            node = tree.nodes[node_id]
            goal = tree.goal_of(node)
            taken = tuple(sorted({p.strategy for p in tree.proposals.values() if p.node == node_id}))
            # a retry must not resend a draft the scorers turned down: tell the model what was
            rejected = tuple(
                p.subgoals for p in sorted(tree.proposals.values(), key=lambda p: (p.draft_number, p.id))
                if p.node == node_id and p.author == me.peer_id and len(p.rejections) >= goal.quorum
            )
            try:
                split = backend.decompose(
                    DecomposeRequest(goal.text, chain_of(tree, node), node.description,
                                     node.depth, goal.max_depth, me.strategy, taken, attempt, rejected)
                )
            except LLMError:
                return None
            return ProposalBody(
                node=node_id,
                model=_model_tag(backend),
                strategy=split.strategy[:40] or me.strategy,
                subgoals=tuple(
                    Subgoal(title=s.title[:120], description=s.description[:1000],
                            executable=s.executable)
                    for s in split.subgoals[:6]
                ),
            )
        case Vote(proposal=proposal_id):
            proposal = tree.proposals[proposal_id]
            node = tree.nodes[proposal.node]
            try:
                scores = backend.score(
                    ScoreRequest(tree.goal_of(node).text, chain_of(tree, node),
                                 proposal.strategy, proposal.subgoals)
                )
            except LLMError:
                return None
            return VoteBody(
                proposal=proposal_id, clarity=scores.clarity, non_overlap=scores.non_overlap,
                coverage=scores.coverage, approve=scores.approve, reason=scores.reason[:500],
                model=_model_tag(backend),
            )
        case Execute(leaf=leaf_id, claim=claim):
            node = tree.nodes[leaf_id]
            others = [tree.nodes[c] for c in tree.nodes[node.parent].children if c != leaf_id] \
                if node.parent is not None else []
            try:
                output = backend.execute(
                    ExecuteRequest(tree.goal_of(node).text, chain_of(tree, node), node.description,
                                   siblings=tuple(o.title for o in others),
                                   sibling_answers=tuple(o.output for o in others if o.output))
                )
            except LLMError as exc:
                return FailureBody(leaf=leaf_id, claim=claim, reason=str(exc)[:500] or "model failed")
            if not output.strip():
                return FailureBody(leaf=leaf_id, claim=claim, reason="the model returned an empty answer")
            return ResultBody(leaf=leaf_id, claim=claim, output=output[:8000], model=_model_tag(backend))
    return None

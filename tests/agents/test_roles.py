"""Role policies decide from the tree alone."""

from __future__ import annotations

import hashlib

from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import GoalBody, ProposalBody, Subgoal, VoteBody
from agents.core.fold import fold
from agents.core.identity import Identity
from agents.roles import Me, Propose, decomposer


class Feed:
    def __init__(self, name: str, role) -> None:
        self.now = 0
        self.author = Author(Identity(hashlib.sha256(name.encode()).digest()), role, HybridClock(lambda: self.now))

    def at(self, ms: int, body):
        self.now = ms
        return self.author.sign(body)


def _split(node: str, tag: str) -> ProposalBody:
    return ProposalBody(node=node, strategy=tag, subgoals=(Subgoal(title=f"{tag} a", executable=True),
                                                           Subgoal(title=f"{tag} b", executable=True)))


def test_a_decomposer_tries_again_only_after_a_quorum_rejected_its_split_and_at_most_three_times() -> None:
    client, dec = Feed("c", "client"), Feed("d", "decomposer")
    scorers = [Feed(f"s{i}", "scorer") for i in range(3)]
    me = Me(dec.author.peer_id, "decomposer")
    goal = client.at(10, GoalBody(text="g", quorum=2, max_depth=2, claim_lease_ms=1000))
    events = [goal]
    assert decomposer.decide(fold(events), me, 0) == [Propose(goal.id, 1)]
    for attempt in (1, 2, 3):
        proposal = dec.at(100 * attempt, _split(goal.id, f"try{attempt}"))
        events.append(proposal)
        assert decomposer.decide(fold(events), me, 0) == []  # waiting for the scorers
        events.append(scorers[0].at(100 * attempt + 1, VoteBody(proposal=proposal.id, clarity=1, non_overlap=1,
                                                                coverage=1, approve=False)))
        assert decomposer.decide(fold(events), me, 0) == []  # one rejection is not a quorum
        events.append(scorers[1].at(100 * attempt + 2, VoteBody(proposal=proposal.id, clarity=1, non_overlap=1,
                                                                coverage=1, approve=False)))
        expected = [Propose(goal.id, attempt + 1)] if attempt < decomposer.MAX_ATTEMPTS else []
        assert decomposer.decide(fold(events), me, 0) == expected


def test_an_executor_leaves_a_leaf_it_gave_up_to_others_for_half_a_lease() -> None:
    from agents.core.events import ClaimBody, FailureBody
    from agents.core.fold import child_node_id
    from agents.roles import Claim, executor

    client, dec, scorer = Feed("c", "client"), Feed("d", "decomposer"), Feed("s", "scorer")
    me_feed, other = Feed("x", "executor"), Feed("y", "executor")
    goal = client.at(10, GoalBody(text="g", quorum=1, max_depth=1, claim_lease_ms=1000))
    proposal = dec.at(20, _split(goal.id, "p"))
    vote = scorer.at(30, VoteBody(proposal=proposal.id, clarity=5, non_overlap=5, coverage=5, approve=True))
    leaf_a, leaf_b = child_node_id(proposal.id, 0), child_node_id(proposal.id, 1)
    mine = me_feed.at(40, ClaimBody(leaf=leaf_a))
    gave_up = me_feed.at(50, FailureBody(leaf=leaf_a, claim=mine.id, reason="model failed"))
    busy = other.at(41, ClaimBody(leaf=leaf_b))  # the other leaf is taken
    tree = fold([goal, proposal, vote, mine, gave_up, busy])
    me = Me(me_feed.author.peer_id, "executor")
    assert tree.nodes[leaf_a].status == "ready"
    assert executor.decide(tree, me, 51) == []  # not straight back to the leaf it just gave up
    assert executor.decide(tree, me, 549) == []
    assert executor.decide(tree, me, 550) == [Claim(leaf_a)]  # half a lease later, nobody took it: retry
    someone_else = Me(other.author.peer_id, "executor")
    assert executor.decide(tree, someone_else, 51) != [Claim(leaf_a)]  # it holds leaf b: it works on that


def test_a_redraft_tells_the_model_what_was_rejected_and_differs_from_it() -> None:
    from agents.llm.base import DecomposeRequest
    from agents.llm.scripted import ScriptedBackend
    from agents.roles.compose import compose

    client, dec = Feed("c", "client"), Feed("d", "decomposer")
    scorers = [Feed(f"s{i}", "scorer") for i in range(2)]
    me = Me(dec.author.peer_id, "decomposer", "day")
    goal = client.at(10, GoalBody(text="Plan a two-week trip to Japan", quorum=2, max_depth=2, claim_lease_ms=1000))
    backend = ScriptedBackend(seed=1)
    first = compose(Propose(goal.id, 1), fold([goal]), backend, me)
    proposal = dec.at(100, first)
    rejections = [s.at(200 + i, VoteBody(proposal=proposal.id, clarity=1, non_overlap=1, coverage=1,
                                         approve=False)) for i, s in enumerate(scorers)]
    tree = fold([goal, proposal, *rejections])

    seen: list[DecomposeRequest] = []

    class Recording(ScriptedBackend):
        def decompose(self, request: DecomposeRequest):
            seen.append(request)
            return super().decompose(request)

    second = compose(Propose(goal.id, 2), tree, Recording(seed=1), me)
    assert seen[0].attempt == 2
    assert seen[0].rejected == (tuple(s.title for s in first.subgoals),)
    assert [s.title for s in second.subgoals] != [s.title for s in first.subgoals]
    assert second.strategy != first.strategy

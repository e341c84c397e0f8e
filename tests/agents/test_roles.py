"""Role policies decide from the tree and a clock reading alone."""

from __future__ import annotations

from agents.core.events import (
    AckBody,
    ClaimBody,
    FailureBody,
    ProposalBody,
    Subgoal,
    VoteBody,
)
from agents.core.fold import child_node_id, fold
from agents.roles import (
    Ack,
    Ballot,
    Candidate,
    Claim,
    Execute,
    Me,
    Promise,
    Propose,
    Renew,
    Vote,
    decomposer,
    executor,
    scorer,
)
from agents.roles.scorer import FALLBACK_ROUND
from tests.agents.test_rounds import Board
from tests.builders import Feed, goal


def _split(node: str, tag: str) -> ProposalBody:
    return ProposalBody(node=node, strategy=tag, subgoals=(Subgoal(title=f"{tag} a", executable=True),
                                                           Subgoal(title=f"{tag} b", executable=True)))


def _vote(proposal: str, approve: bool) -> VoteBody:
    return VoteBody(proposal=proposal, clarity=3 if approve else 1, non_overlap=3, coverage=3, approve=approve)


def test_a_decomposer_tries_again_only_after_a_quorum_rejected_its_split_and_at_most_three_times() -> None:
    client, dec = Feed("c", "client"), Feed("d", "decomposer")
    scorers = [Feed(f"s{i}", "scorer") for i in range(3)]
    me = Me(dec.peer_id, "decomposer")
    g = client.at(10, goal("g", [s.peer_id for s in scorers], 2))
    events = [g]
    assert decomposer.decide(fold(events), me, 0) == [Propose(g.id, 1)]
    for attempt in (1, 2, 3):
        proposal = dec.at(100 * attempt, _split(g.id, f"try{attempt}"))
        events.append(proposal)
        assert decomposer.decide(fold(events), me, 0) == []  # waiting for the scorers
        events.append(scorers[0].at(100 * attempt + 1, _vote(proposal.id, False)))
        assert decomposer.decide(fold(events), me, 0) == []  # one rejection is not a quorum
        events.append(scorers[1].at(100 * attempt + 2, _vote(proposal.id, False)))
        expected = [Propose(g.id, attempt + 1)] if attempt < decomposer.MAX_ATTEMPTS else []
        assert decomposer.decide(fold(events), me, 0) == expected


def test_a_coordinator_names_its_best_approved_draft_and_the_others_ballot_their_verdict() -> None:
    board = Board(tag="roles")
    c1 = board.coordinator(1)
    other = board.others(1)[0]
    me = Me(c1.peer_id, "scorer")
    tree = fold(board.events)
    assert set(scorer.decide(tree, me, 200)) == {Vote(board.v), Vote(board.w)}  # assess first
    board.events += [c1.at(board.t + 1, _vote(board.v, False)), c1.at(board.t + 2, _vote(board.w, True))]
    board.t += 2
    named = scorer.decide(fold(board.events), me, 300)[0]
    assert named == Candidate(board.node, 1, board.w)
    candidate = board.candidate(1, board.w)
    them = Me(other.peer_id, "scorer")
    assert scorer.decide(fold(board.events), them, 300)[0] == Vote(board.w)  # assess the candidate first
    board.events.append(other.at(board.t + 1, _vote(board.w, False)))
    board.t += 1
    assert scorer.decide(fold(board.events), them, 300)[0] == Ballot(board.node, 1, candidate.id, False)


def test_a_scorer_moves_on_after_the_round_times_out_and_falls_back_to_the_best_draft() -> None:
    """Nobody approves any draft: rounds time out, and from round 3 the coordinator names the
    best-scored draft anyway and everybody approves it: a node is never stuck on bad drafts."""
    board = Board(tag="fallback")
    for s in board.scorers:
        board.events += [s.at(board.t + 1, _vote(board.v, False)), s.at(board.t + 2, _vote(board.w, False))]
        board.t += 2
    round_ms = fold(board.events).goals[0].round_ms
    first_draft = board.drafts[0].ts.ms
    me = Me(board.scorers[0].peer_id, "scorer")
    assert not [i for i in scorer.decide(fold(board.events), me, first_draft + round_ms - 1) if isinstance(i, Promise)]
    assert Promise(board.node, 2) in scorer.decide(fold(board.events), me, first_draft + round_ms)
    for round_ in range(2, FALLBACK_ROUND + 1):
        promises = [board.promise(s, round_) for s in board.scorers]
    coordinator = board.coordinator(FALLBACK_ROUND)
    named = scorer.decide(fold(board.events), Me(coordinator.peer_id, "scorer"), 10**9)[0]
    assert isinstance(named, Candidate) and named.round == FALLBACK_ROUND
    candidate = board.candidate(FALLBACK_ROUND, named.value, promises)
    for s in board.scorers:
        assert Ballot(board.node, FALLBACK_ROUND, candidate.id, True) in scorer.decide(fold(board.events), Me(
            s.peer_id, "scorer"), 10**9)


def test_an_executor_starts_the_model_only_once_its_claim_is_granted() -> None:
    board = Board(tag="grant")
    first = board.candidate(1, board.v)
    for s in board.scorers[:2]:
        board.ballot(s, first)
    leaf = child_node_id(board.v, 0)
    x = Feed("grant/x", "executor")
    me = Me(x.peer_id, "executor")
    claim_intent = executor.decide(fold(board.events), me, 1000)[0]
    assert isinstance(claim_intent, Claim) and claim_intent.epoch == 1
    claim = board._add(x, ClaimBody(leaf=claim_intent.leaf, epoch=1))
    assert executor.decide(fold(board.events), me, 1001) == []  # waiting for the grant
    acks = [scorer.decide(fold(board.events), Me(s.peer_id, "scorer"), 1001) for s in board.scorers]
    assert all(Ack(claim_intent.leaf, claim.id, 1) in a for a in acks)
    for s in board.scorers[:2]:
        board._add(s, AckBody(leaf=claim_intent.leaf, claim=claim.id, epoch=1))
    assert Execute(claim_intent.leaf, claim.id) in executor.decide(fold(board.events), me, 1002)
    assert leaf in (child_node_id(board.v, 0), child_node_id(board.v, 1))


def test_an_executor_that_may_think_twice_at_once_works_two_leaves_one_claim_at_a_time() -> None:
    board = Board(tag="twice")
    board.accept(("a", "b", "c"), "twice")
    x = Feed("twice/x", "executor")
    one, two = Me(x.peer_id, "executor"), Me(x.peer_id, "executor", at_once=2)

    def claim(intent: Claim):
        made = board._add(x, ClaimBody(leaf=intent.leaf, epoch=intent.epoch))
        return made, lambda: [board._add(s, AckBody(leaf=intent.leaf, claim=made.id, epoch=intent.epoch))
                              for s in board.scorers[:2]]

    [first_claim] = executor.decide(fold(board.events), two, board.t)
    a, grant_a = claim(first_claim)
    assert executor.decide(fold(board.events), two, board.t) == []  # one claim in flight at a time
    grant_a()
    assert executor.decide(fold(board.events), one, board.t) == [Execute(a.body.leaf, a.id)]  # one at a time: busy
    late = executor.decide(fold(board.events), two, board.t + 600)  # half a 1 s lease on: renew first
    assert Execute(a.body.leaf, a.id) in late and any(isinstance(i, Renew) for i in late)
    assert not any(isinstance(i, Claim) for i in late)
    working = executor.decide(fold(board.events), two, board.t)  # two: takes another leaf beside it
    assert working[0] == Execute(a.body.leaf, a.id) and isinstance(working[1], Claim)
    assert working[1].leaf != a.body.leaf
    b, grant_b = claim(working[1])
    assert executor.decide(fold(board.events), two, board.t) == [Execute(a.body.leaf, a.id)]  # b waits: no third
    grant_b()
    both = executor.decide(fold(board.events), two, board.t)
    assert set(both) == {Execute(a.body.leaf, a.id), Execute(b.body.leaf, b.id)}  # and no third claim
    assert len(fold(board.events).leaves()) == 3


def test_an_executor_leaves_a_leaf_it_gave_up_to_others_for_half_a_lease() -> None:
    board = Board(tag="gaveup")
    first = board.candidate(1, board.v)
    for s in board.scorers[:2]:
        board.ballot(s, first)
    leaf_a, leaf_b = child_node_id(board.v, 0), child_node_id(board.v, 1)
    x, y = Feed("gaveup/x", "executor"), Feed("gaveup/y", "executor")
    mine = board._add(x, ClaimBody(leaf=leaf_a, epoch=1))
    busy = board._add(y, ClaimBody(leaf=leaf_b, epoch=1))
    for s in board.scorers[:2]:
        board._add(s, AckBody(leaf=leaf_a, claim=mine.id, epoch=1))
        board._add(s, AckBody(leaf=leaf_b, claim=busy.id, epoch=1))
    gave_up = board._add(x, FailureBody(leaf=leaf_a, claim=mine.id, reason="model failed"))
    tree = fold(board.events)
    lease = tree.goals[0].claim_lease_ms
    me = Me(x.peer_id, "executor")
    beat = tree.nodes[leaf_a].heartbeat.ms
    assert tree.nodes[leaf_a].holder_failed and gave_up.id
    assert executor.decide(tree, me, beat + 1) == []  # not straight back to the leaf it just gave up
    assert executor.decide(tree, me, beat + lease // 2) == [Claim(leaf_a, 2)]  # half a lease later: retry
    assert Ack(leaf_a, mine.id, 1) not in scorer.decide(tree, Me(board.scorers[2].peer_id, "scorer"), beat)


def test_a_redraft_tells_the_model_what_was_rejected_and_differs_from_it() -> None:
    from agents.llm.base import DecomposeRequest
    from agents.llm.scripted import ScriptedBackend
    from agents.roles.compose import compose

    client, dec = Feed("c", "client"), Feed("d", "decomposer")
    scorers = [Feed(f"s{i}", "scorer") for i in range(2)]
    me = Me(dec.peer_id, "decomposer", "day")
    g = client.at(10, goal("Plan a two-week trip to Japan", [s.peer_id for s in scorers], 2))
    backend = ScriptedBackend(seed=1)
    first = compose(Propose(g.id, 1), fold([g]), backend, me)
    proposal = dec.at(100, first)
    rejections = [s.at(200 + i, _vote(proposal.id, False)) for i, s in enumerate(scorers)]
    tree = fold([g, proposal, *rejections])

    seen: list[DecomposeRequest] = []

    class Recording(ScriptedBackend):
        def decompose(self, request: DecomposeRequest):
            seen.append(request)
            return super().decompose(request)

    second = compose(Propose(g.id, 2), tree, Recording(seed=1), me)
    assert seen[0].attempt == 2
    assert seen[0].rejected == (tuple(s.title for s in first.subgoals),)
    assert [s.title for s in second.subgoals] != [s.title for s in first.subgoals]
    assert second.strategy != first.strategy


def test_ballots_and_candidates_are_never_repeated_after_a_restart() -> None:
    """What a scorer did is read from its own events in the tree, not from memory."""
    board = Board(tag="restart")
    c1 = board.coordinator(1)
    board.events.append(c1.at(board.t + 1, _vote(board.v, True)))
    board.t += 1
    candidate = board.candidate(1, board.v)
    board.ballot(c1, candidate)
    again = scorer.decide(fold(board.events), Me(c1.peer_id, "scorer"), board.t + 1)
    assert not [i for i in again if isinstance(i, (Candidate, Ballot))]


def test_scorers_that_acked_several_ungranted_epochs_can_still_grant_the_next() -> None:
    """After a partition each side may have acked its own executor's claims for several epochs,
    none granted: the next epoch must still be acked (a ceiling at the holder's epoch used to
    stop the leaf for good)."""
    board = Board(tag="epochs")
    first = board.candidate(1, board.v)
    for s in board.scorers[:2]:
        board.ballot(s, first)
    leaf = child_node_id(board.v, 0)
    x, y = Feed("epochs/x", "executor"), Feed("epochs/y", "executor")
    a, b, c = board.scorers
    for epoch in range(1, 6):
        cx = board._add(x, ClaimBody(leaf=leaf, epoch=epoch))
        cy = board._add(y, ClaimBody(leaf=leaf, epoch=epoch))
        board._add(a, AckBody(leaf=leaf, claim=cx.id, epoch=epoch))
        board._add(b, AckBody(leaf=leaf, claim=cy.id, epoch=epoch))
    tree = fold(board.events)
    assert tree.nodes[leaf].status == "ready"
    claim = executor.decide(tree, Me(x.peer_id, "executor"), 10**9)[0]
    assert claim == Claim(leaf, 6)
    fresh = board._add(x, ClaimBody(leaf=leaf, epoch=6))
    for s in (a, b):
        assert Ack(leaf, fresh.id, 6) in scorer.decide(fold(board.events), Me(s.peer_id, "scorer"), 10**9)
    assert c.peer_id

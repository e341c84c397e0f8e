"""Claims by example (PROTOCOL.md, sections 6-7): epochs granted by a quorum of acks, results
decided by the leaf's rounds, and the deadlock that exclusive accepts used to cause."""

from __future__ import annotations

from agents.core.events import AckBody, ClaimBody, FailureBody, RenewBody, ResultBody
from agents.core.fold import child_node_id, fold
from chaos.checkers.reference import Model
from tests.agents.test_rounds import Board
from tests.builders import Feed


class Leaf(Board):
    """A board whose root is split by ``v`` (two executable subgoals), and executors for its first leaf."""

    def __init__(self, tag: str = "leaf", executors: int = 2) -> None:
        super().__init__(tag=tag)
        first = self.candidate(1, self.v)
        for scorer in self.scorers[:2]:
            self.ballot(scorer, first)
        assert self.split() == self.v
        self.leaf = child_node_id(self.v, 0)
        self.executors = [Feed(f"{tag}/e{i}", "executor") for i in range(executors)]

    def claim(self, executor: Feed, epoch: int = 1):
        return self._add(executor, ClaimBody(leaf=self.leaf, epoch=epoch))

    def ack(self, scorer: Feed, claim):
        return self._add(scorer, AckBody(leaf=self.leaf, claim=claim.id, epoch=claim.body.epoch))

    def result(self, executor: Feed, claim, text: str = "done"):
        return self._add(executor, ResultBody(leaf=self.leaf, claim=claim.id, output=text))

    def tree(self):
        tree, model = fold(self.events), Model(self.events)
        node = tree.nodes[self.leaf]
        assert node.result == model.nodes[self.leaf].result
        if node.result is None:
            assert (node.claim if node.status == "claimed" else None) == model.nodes[self.leaf].holder
        return tree

    def decide_leaf(self, value, round_: int = 1, voters=None, promises=()):
        """Run one round on the leaf: its coordinator names ``value``, ``voters`` approve."""
        self.node = self.leaf
        candidate = self.candidate(round_, value.id, list(promises))
        for scorer in voters if voters is not None else self.scorers:
            self.ballot(scorer, candidate)
        return candidate


def test_a_claim_is_granted_by_a_quorum_of_acks_and_the_highest_epoch_holds() -> None:
    leaf = Leaf()
    x, y = leaf.executors
    first = leaf.claim(x)
    leaf.ack(leaf.scorers[0], first)
    assert leaf.tree().nodes[leaf.leaf].status == "ready"
    leaf.ack(leaf.scorers[1], first)
    node = leaf.tree().nodes[leaf.leaf]
    assert (node.status, node.claim, node.epoch) == ("claimed", first.id, 1)
    second = leaf.claim(y, epoch=2)
    for scorer in leaf.scorers[1:]:
        leaf.ack(scorer, second)
    node = leaf.tree().nodes[leaf.leaf]
    assert (node.claim, node.executor, node.epoch) == (second.id, y.peer_id, 2)


def test_only_a_scorers_first_ack_in_an_epoch_counts() -> None:
    leaf = Leaf()
    x, y = leaf.executors
    cx, cy = leaf.claim(x), leaf.claim(y)
    a, b, _ = leaf.scorers
    leaf.ack(a, cx)
    leaf.ack(a, cy)  # a second ack in epoch 1: ignored
    leaf.ack(b, cy)
    tree = leaf.tree()
    assert tree.claims[cy.id].acks == tuple(sorted([b.peer_id]))
    assert tree.nodes[leaf.leaf].status == "ready"


def test_a_result_counts_only_under_a_granted_claim_by_its_own_author() -> None:
    leaf = Leaf()
    x, y = leaf.executors
    claim = leaf.claim(x)
    stolen = leaf.result(y, claim, "not mine")  # y answers under x's claim: never eligible
    early = leaf.result(x, claim, "before the grant")  # eligible once the claim is granted
    tree = leaf.tree()
    assert (tree.results[stolen.id].status, tree.results[early.id].status) == ("void", "void")
    leaf.ack(leaf.scorers[0], claim)
    leaf.ack(leaf.scorers[1], claim)
    tree = leaf.tree()
    assert (tree.results[stolen.id].status, tree.results[early.id].status) == ("void", "waiting")
    leaf.decide_leaf(early)
    tree = leaf.tree()
    assert tree.nodes[leaf.leaf].result == early.id and tree.complete is False  # the second leaf is open
    assert tree.duplicate_results == 1  # the stolen one


def _deadlock_board() -> tuple[Leaf, object, object]:
    """A leaf whose rounds 1 and 2 are coordinated by scorers 0 and 1 (scorer 2 will be gone)."""
    for n in range(200):
        leaf = Leaf(tag=f"deadlock-{n}")
        leaf.node = leaf.leaf
        a, b, _gone = leaf.scorers
        if leaf.coordinator(1) is a and leaf.coordinator(2) is b:
            return leaf, a, b
    raise AssertionError("no such board among 200 tags")


def test_two_surviving_scorers_who_backed_different_results_still_decide() -> None:
    """Seed 58's deadlock, replayed: epoch 1's holder answers during a partition; epoch 2 is
    granted to another executor, who answers too. One scorer is gone; the two left backed
    different results in round 1 (exclusive accepts used to stall here for ever). Round 2's
    promises carry the approved value over, and both approve it."""
    leaf, a, b = _deadlock_board()
    x, y = leaf.executors
    gone = leaf.scorers[2]
    one = leaf.claim(x)
    leaf.ack(a, one)
    leaf.ack(gone, one)
    leaf.result(x, one, "from epoch 1")
    two = leaf.claim(y, epoch=2)
    leaf.ack(a, two)
    leaf.ack(b, two)
    r2 = leaf.result(y, two, "from epoch 2")
    first = leaf.candidate(1, r2.id)
    leaf.ballot(a, first)
    leaf.ballot(b, first, approve=False)  # b backed epoch 1's answer
    assert leaf.tree().nodes[leaf.leaf].result is None
    leaf.decide_leaf(r2, 2, (a, b), [leaf.promise(a, 2), leaf.promise(b, 2)])
    tree = leaf.tree()
    assert tree.nodes[leaf.leaf].result == r2.id and tree.rounds[(leaf.leaf, 2)].forced


def test_renewals_and_failures_are_the_holders_heartbeat() -> None:
    leaf = Leaf()
    x, _ = leaf.executors
    claim = leaf.claim(x)
    leaf.ack(leaf.scorers[0], claim)
    leaf.ack(leaf.scorers[1], claim)
    renew = leaf._add(x, RenewBody(claim=claim.id))
    node = leaf.tree().nodes[leaf.leaf]
    assert node.heartbeat == renew.ts and not node.holder_failed
    leaf._add(x, FailureBody(leaf=leaf.leaf, claim=claim.id, reason="model gave up"))
    assert leaf.tree().nodes[leaf.leaf].holder_failed

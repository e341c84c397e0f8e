"""The round rules (PROTOCOL.md, section 5) as stories with a hand-built board.

Each test plays a history a hostile or unlucky cluster could produce and checks
what the fold accepts, and that the reference model agrees.
"""

from __future__ import annotations

from agents.core.events import BallotBody, CandidateBody, Event, PromiseBody, ProposalBody, Subgoal
from agents.core.fold import fold
from chaos.checkers.reference import Model
from tests.builders import Feed, goal


class Board:
    """A goal, two drafts on its root, and ``n`` scorers with quorum ``q``."""

    def __init__(self, n: int = 3, q: int = 2, tag: str = "board") -> None:
        self.t = 100
        self.scorers = [Feed(f"{tag}/s{i}", "scorer") for i in range(n)]
        self.roster = sorted(s.peer_id for s in self.scorers)
        self.events: list[Event] = []
        client, decomposer = Feed(f"{tag}/c", "client"), Feed(f"{tag}/d", "decomposer")
        self.goal = self._add(client, goal("plan", self.roster, q))
        self.node = self.goal.id
        self.drafts = [self._add(decomposer, ProposalBody(node=self.node, strategy=f"s{i}", subgoals=(
            Subgoal(title=f"a{i}", executable=True), Subgoal(title=f"b{i}", executable=True)))) for i in range(2)]
        self.v, self.w = (d.id for d in self.drafts)

    def _add(self, feed: Feed, body: object) -> Event:
        self.t += 1
        event = feed.at(self.t, body)
        self.events.append(event)
        return event

    def coordinator(self, round_: int) -> Feed:
        peer = self.roster[(int(self.node[:8], 16) + round_ - 1) % len(self.roster)]
        return next(s for s in self.scorers if s.peer_id == peer)

    def others(self, round_: int) -> list[Feed]:
        return [s for s in self.scorers if s is not self.coordinator(round_)]

    def promise(self, scorer: Feed, round_: int) -> Event:
        return self._add(scorer, PromiseBody(node=self.node, round=round_))

    def candidate(self, round_: int, value: str, promises: list[Event] = (), certificate: list[Event] = (),
                  by: Feed | None = None) -> Event:
        return self._add(by or self.coordinator(round_), CandidateBody(
            node=self.node, round=round_, value=value, promises=tuple(p.id for p in promises),
            certificate=tuple(b.id for b in certificate)))

    def ballot(self, scorer: Feed, candidate: Event, approve: bool = True) -> Event:
        return self._add(scorer, BallotBody(node=self.node, round=candidate.body.round,  # type: ignore[union-attr]
                                            candidate=candidate.id, approve=approve))

    def accept(self, titles: tuple[str, ...], tag: str) -> Event:
        """A third draft with one executable leaf per title, accepted in round 1 by a quorum of
        two ballots; the draft."""
        draft = self._add(Feed(f"{tag}/d", "decomposer"), ProposalBody(node=self.node, strategy="three", subgoals=tuple(
            Subgoal(title=t, executable=True) for t in titles)))
        first = self.candidate(1, draft.id)
        for s in self.scorers[:2]:
            self.ballot(s, first)
        return draft

    def split(self, events: list[Event] | None = None) -> str | None:
        chosen = self.events if events is None else events
        tree, model = fold(chosen), Model(chosen)
        assert tree.nodes[self.node].split == model.nodes[self.node].split, "fold and reference disagree"
        return tree.nodes[self.node].split


def test_a_quorum_of_ballots_in_one_round_accepts_the_candidate() -> None:
    board = Board()
    first = board.candidate(1, board.v)
    board.ballot(board.coordinator(1), first)
    assert board.split() is None
    board.ballot(board.others(1)[0], first)
    assert board.split() == board.v


def test_a_candidate_named_by_anyone_but_the_round_coordinator_counts_for_nothing() -> None:
    board = Board()
    wrong = board.candidate(1, board.v, by=board.others(1)[0])
    for scorer in board.scorers:
        board.ballot(scorer, wrong)
    assert board.split() is None


def test_a_second_ballot_in_one_round_and_a_late_ballot_after_a_promise_do_not_count() -> None:
    board = Board()
    first = board.candidate(1, board.v)
    a, b = board.others(1)
    board.ballot(board.coordinator(1), first)
    board.ballot(a, first, approve=False)
    board.ballot(a, first, approve=True)  # a second ballot in round 1: its first one stands
    assert board.split() is None
    board.promise(b, 2)
    board.ballot(b, first, approve=True)  # b promised round 2: a round-1 ballot now is too late
    assert board.split() is None


def _two_rounds_then_promises(board: Board) -> list[Event]:
    """Round 1 names v: only its coordinator approves. Round 2, justified by the other two's
    promises (neither approved anything), is free and names w; one of them approves it.
    Returns round 3's promises by v's approver and w's approver."""
    c1 = board.coordinator(1)
    first = board.candidate(1, board.v)
    board.ballot(c1, first)
    rest = [s for s in board.scorers if s is not c1]
    for scorer in rest:
        board.ballot(scorer, first, approve=False)
    second = board.candidate(2, board.w, [board.promise(s, 2) for s in rest])
    board.ballot(rest[0], second)
    assert board.split() is None
    return [board.promise(c1, 3), board.promise(rest[0], 3)]


def test_a_later_round_carries_over_the_highest_reported_value() -> None:
    """Round 3's promises report v (round 1) and w (round 2): only w, the higher, may be named."""
    lower = Board(tag="carry")
    carried_lower = lower.candidate(3, lower.v, _two_rounds_then_promises(lower))
    assert fold(lower.events).rounds.get((lower.node, 3)).candidate is None  # invalid
    for scorer in lower.scorers:
        lower.ballot(scorer, carried_lower)
    assert lower.split() is None

    higher = Board(tag="carry")  # the same history, byte for byte, up to round 3's candidate
    carried_higher = higher.candidate(3, higher.w, _two_rounds_then_promises(higher))
    assert fold(higher.events).rounds[(higher.node, 3)].forced
    for scorer in higher.scorers:
        higher.ballot(scorer, carried_higher)
    assert higher.split() == higher.w


def test_a_candidate_stays_undetermined_until_its_promises_arrive_then_counts() -> None:
    board = Board()
    a, b = board.scorers[:2]
    promises = [board.promise(a, 2), board.promise(b, 2)]
    second = board.candidate(2, board.v, promises)
    for scorer in board.scorers:
        board.ballot(scorer, second)
    without = [e for e in board.events if e.id != promises[0].id and e.author != a.peer_id]
    assert board.split(without) is None  # a's promise (and feed) missing: not decided yet
    assert board.split() == board.v


def test_one_equivocating_scorer_cannot_make_a_bft_board_accept_two_values() -> None:
    """4 scorers, quorum 3 (tolerates one equivocator). The equivocator, coordinating round 1,
    names v to two honest scorers and w to the third, and approves both. v gets three
    approvals and is accepted; w gets two and can never be accepted."""
    board = Board(n=4, q=3, tag="bft")
    liar = board.coordinator(1)
    honest = board.others(1)
    for_v = board.candidate(1, board.v)
    for_w = liar.fork(board.t + 1, CandidateBody(node=board.node, round=1, value=board.w))
    board.events.append(for_w)
    board.ballot(liar, for_v)
    board.events.append(liar.fork(board.t + 5, BallotBody(node=board.node, round=1, candidate=for_w.id,
                                                          approve=True)))
    board.ballot(honest[0], for_v)
    board.ballot(honest[1], for_v)
    board.ballot(honest[2], for_w)
    tree = fold(board.events)
    assert tree.equivocators == {liar.peer_id}
    assert board.split() == board.v
    assert not [i for i in tree.issues if i.rule == "breach"]


def test_a_value_from_an_equivocating_coordinators_round_needs_a_certificate() -> None:
    """Round 1's coordinator forks: it names v and w and ballots for both. v is accepted (three
    approvals); w has two. Round 2's promises report both values at round 1, so a candidate may
    carry only the one a quorum of round-1 ballots certifies: naming w without a certificate is
    invalid (else w could be accepted too), naming v with its certificate is valid."""
    board = Board(n=4, q=3, tag="cert")
    liar = board.coordinator(1)
    h0, h1, h2 = board.others(1)
    for_v = board.candidate(1, board.v)
    for_w = liar.fork(board.t + 1, CandidateBody(node=board.node, round=1, value=board.w))
    board.events.append(for_w)
    board.ballot(liar, for_w)  # its main chain approves w ...
    v_from_liar = liar.fork(board.t + 1, BallotBody(node=board.node, round=1, candidate=for_v.id, approve=True))
    board.events.append(v_from_liar)  # ... and a forked branch approves v
    certificate = [board.ballot(h0, for_v), board.ballot(h1, for_v), v_from_liar]
    board.ballot(h2, for_w)
    assert board.split() == board.v
    promises = [board.promise(h2, 2), board.promise(liar, 2), board.promise(h1, 2)]
    coordinator = board.coordinator(2)
    uncertified = board.candidate(2, board.w, promises, by=coordinator)
    assert fold(board.events).rounds[(board.node, 2)].candidate is None
    for scorer in (h2, liar, h0):
        board.ballot(scorer, uncertified)
    tree = fold(board.events)
    assert board.split() == board.v and not [i for i in tree.issues if i.rule == "breach"]

    replay = Board(n=4, q=3, tag="cert-v")
    liar = replay.coordinator(1)
    h0, h1, h2 = replay.others(1)
    for_v = replay.candidate(1, replay.v)
    for_w = liar.fork(replay.t + 1, CandidateBody(node=replay.node, round=1, value=replay.w))
    replay.events.append(for_w)
    replay.ballot(liar, for_w)
    v_from_liar = liar.fork(replay.t + 1, BallotBody(node=replay.node, round=1, candidate=for_v.id, approve=True))
    replay.events.append(v_from_liar)
    certificate = [replay.ballot(h0, for_v), replay.ballot(h1, for_v), v_from_liar]
    replay.ballot(h2, for_w)
    promises = [replay.promise(h2, 2), replay.promise(liar, 2), replay.promise(h1, 2)]
    certified = replay.candidate(2, replay.v, promises, certificate)
    assert fold(replay.events).rounds[(replay.node, 2)].candidate == certified.id


def test_a_coordinators_second_candidate_in_one_round_counts_for_nothing() -> None:
    """Without a fork nobody sees equivocation, yet two candidates in one round would split its
    ballots for good (no later round could carry either): only the first one counts."""
    board = Board(tag="twice")
    first = board.candidate(1, board.v)
    second = board.candidate(1, board.w)
    for scorer in board.scorers:
        board.ballot(scorer, second)
    assert board.split() is None
    assert fold(board.events).rounds[(board.node, 1)].candidate == first.id

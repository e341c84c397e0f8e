"""Admission: tickets bind a peer to one role in one cluster, and the intake refuses the rest."""

from __future__ import annotations

import json

import pytest

from agents.core.admission import Gate, TicketError, issue
from agents.core.clock import HybridClock
from agents.core.events import ProposalBody, Subgoal
from agents.core.identity import Identity
from agents.core.intake import Admitted, Intake, Refused
from tests.builders import AUTHORITY, CLUSTER, Feed, gate, identity, ticket_sig

PROPOSAL = ProposalBody(node="ab" * 32, strategy="s", subgoals=(Subgoal(title="a", executable=True),
                                                               Subgoal(title="b", executable=True)))


def _intake() -> Intake:
    return Intake(HybridClock(lambda: 10_000), gate())


def test_an_admitted_author_is_admitted() -> None:
    event = Feed("alice", "decomposer").at(100, PROPOSAL)
    assert isinstance(_intake().offer(event.to_wire()), Admitted)


@pytest.mark.parametrize("forgery", ["other authority", "other cluster", "other role", "other peer", "garbage"])
def test_a_ticket_that_does_not_admit_the_author_in_this_role_here_is_refused_once(forgery: str) -> None:
    alice = identity("alice")
    sig = {
        "other authority": ticket_sig(alice.peer_id, "decomposer", authority=Identity(b"x" * 32)),
        "other cluster": ticket_sig(alice.peer_id, "decomposer", cluster="elsewhere"),
        "other role": ticket_sig(alice.peer_id, "scorer"),
        "other peer": ticket_sig(identity("bob").peer_id, "decomposer"),
        "garbage": "A" * 86 + "==",
    }[forgery]
    event = Feed("alice", "decomposer", ticket=sig).at(100, PROPOSAL)
    intake = _intake()
    first, again = intake.offer(event.to_wire()), intake.offer(event.to_wire())
    assert isinstance(first, Refused) and first.rule == "ticket" and first.first
    assert isinstance(again, Refused) and not again.first  # the same bad event is counted once
    assert intake.refused == {"ticket": 1}
    assert intake.knows(event.id)  # sync will not fetch it again
    assert intake.screen(event.to_wire()) is not None  # and gossip does not relay it


def test_the_same_undecodable_bytes_are_counted_once_and_never_block_the_real_event() -> None:
    event = Feed("alice", "decomposer").at(100, PROPOSAL)
    spaced = json.dumps(json.loads(event.to_wire()), sort_keys=True).encode()  # same id, not canonical
    intake = _intake()
    first, again = intake.offer(spaced), intake.screen(spaced)
    assert isinstance(first, Refused) and first.rule == "canonical" and first.first
    assert isinstance(again, Refused) and not again.first
    assert isinstance(intake.offer(b"{garbage"), Refused)
    assert intake.refused == {"canonical": 1, "json": 1}
    # the bad copy is remembered by its bytes, not by the id it carries: the real one gets in
    assert not intake.knows(event.id)
    assert isinstance(intake.offer(event.to_wire()), Admitted)


def test_the_gate_names_what_is_wrong_with_a_ticket() -> None:
    ticket = issue(AUTHORITY, CLUSTER, identity("alice").peer_id, "scorer")
    Gate(CLUSTER, AUTHORITY.peer_id).check(ticket)
    with pytest.raises(TicketError, match="cluster 'test', not 'prod'"):
        Gate("prod", AUTHORITY.peer_id).check(ticket)
    with pytest.raises(TicketError, match="not this cluster's authority"):
        Gate(CLUSTER, identity("other").peer_id).check(ticket)
    with pytest.raises(TicketError, match="unknown role"):
        issue(AUTHORITY, CLUSTER, identity("alice").peer_id, "king")


def test_a_ticket_round_trips_through_its_file_form() -> None:
    ticket = issue(AUTHORITY, CLUSTER, identity("alice").peer_id, "executor")
    from agents.core.admission import Ticket

    assert Ticket.from_json(json.loads(json.dumps(ticket.to_json()))) == ticket
    with pytest.raises(TicketError, match="lacks sig"):
        Ticket.from_json({k: v for k, v in ticket.to_json().items() if k != "sig"})

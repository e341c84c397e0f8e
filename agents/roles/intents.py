"""What a role decides to do next. A driver (the simulated world, or a networked member)
carries intents out: it asks the model where one is needed, signs the event and publishes it.

``Propose``, ``Vote`` and ``Execute`` need a model call; the others are bookkeeping
events a member publishes at once."""

from __future__ import annotations

from dataclasses import dataclass

from agents.core.events import Role


@dataclass(frozen=True)
class Me:
    """The member a policy decides for. ``strategy`` is a decomposer's preferred way to split;
    ``at_once`` how many model calls it may have under way together
    (``agents.roles.calls_at_once``), and so how many leaves an executor works on at once."""

    peer_id: str
    role: Role
    strategy: str = "activity"
    at_once: int = 1


@dataclass(frozen=True)
class Propose:
    node: str
    attempt: int = 1  # a decomposer proposes again when its last split was rejected


@dataclass(frozen=True)
class Vote:
    """Assess a draft (model call): scores and whether this scorer approves it."""

    proposal: str


@dataclass(frozen=True)
class Promise:
    node: str
    round: int


@dataclass(frozen=True)
class Candidate:
    node: str
    round: int
    value: str
    promises: tuple[str, ...] = ()
    certificate: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ballot:
    node: str
    round: int
    candidate: str
    approve: bool


@dataclass(frozen=True)
class Ack:
    leaf: str
    claim: str
    epoch: int


@dataclass(frozen=True)
class Claim:
    leaf: str
    epoch: int = 1


@dataclass(frozen=True)
class Execute:
    leaf: str
    claim: str


@dataclass(frozen=True)
class Renew:
    claim: str


Intent = Propose | Vote | Promise | Candidate | Ballot | Ack | Claim | Execute | Renew
THINKING = (Propose, Vote, Execute)  # the intents that need a model call

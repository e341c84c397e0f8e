"""What a role decides to do next. A driver (in-process simulation, or a networked
member) carries intents out: it asks the model, signs the event and publishes it."""

from __future__ import annotations

from dataclasses import dataclass

from agents.core.events import Role


@dataclass(frozen=True)
class Me:
    """The member a policy decides for. ``strategy`` is a decomposer's preferred way to split."""

    peer_id: str
    role: Role
    strategy: str = "activity"


@dataclass(frozen=True)
class Propose:
    node: str
    attempt: int = 1  # a decomposer proposes again when its last split was rejected


@dataclass(frozen=True)
class Vote:
    proposal: str


@dataclass(frozen=True)
class Claim:
    leaf: str


@dataclass(frozen=True)
class Execute:
    leaf: str
    claim: str


@dataclass(frozen=True)
class Renew:
    claim: str


Intent = Propose | Vote | Claim | Execute | Renew

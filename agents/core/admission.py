"""Admission: who may take part in a cluster, and in which role (PROTOCOL.md, section 1).

A cluster has a name and an authority key. A member's **ticket** is the
authority's signature over ``(authority, cluster, peer id, role)``; every event
carries its author's ticket signature, and the sync conversation opens with
each side's ticket. ``Gate`` is what a receiver checks against: it knows the
cluster and the authority, so a ticket from another cluster, another
authority, another peer or another role does not verify. Verified tickets are
remembered (a ticket is checked once per author, not once per event).

The authority's secret key never leaves the operator's cluster directory
(``swarm cluster init``); members hold only their tickets.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from agents.core.canonical import canonical_bytes
from agents.core.identity import BadPeerIdError, Identity, public_key_of, verify

TICKET_DOMAIN = b"swarm-plan/ticket/v1\n"
ROLES = ("client", "decomposer", "scorer", "executor", "observer")


class TicketError(ValueError):
    """A ticket that does not admit its holder; the message says why and what to do."""


def ticket_bytes(authority: str, cluster: str, peer: str, role: str) -> bytes:
    """The exact bytes an authority signs to admit ``peer`` as ``role`` in ``cluster``."""
    return TICKET_DOMAIN + canonical_bytes({"authority": authority, "cluster": cluster, "peer": peer, "role": role})


@dataclass(frozen=True)
class Ticket:
    """An admission ticket: ``sig`` is the authority's signature over ``ticket_bytes``."""

    cluster: str
    authority: str
    peer: str
    role: str
    sig: str

    def to_json(self) -> dict[str, Any]:
        return {"v": 1, "cluster": self.cluster, "authority": self.authority, "peer": self.peer,
                "role": self.role, "sig": self.sig}

    def wire(self) -> dict[str, str]:
        """What the sync conversation carries (the receiver knows cluster and authority)."""
        return {"peer": self.peer, "role": self.role, "sig": self.sig}

    @classmethod
    def from_json(cls, record: Any, where: str = "ticket") -> Ticket:
        if not isinstance(record, dict):
            raise TicketError(f"{where} is not a JSON object")
        fields = ("cluster", "authority", "peer", "role", "sig")
        missing = [f for f in fields if not isinstance(record.get(f), str)]
        if missing:
            raise TicketError(f"{where} lacks {', '.join(missing)}; issue a new one with 'swarm admit'")
        return cls(*(record[f] for f in fields))

    @classmethod
    def read(cls, path: Any) -> Ticket:
        try:
            return cls.from_json(json.loads(open(path, encoding="utf-8").read()), str(path))
        except (OSError, json.JSONDecodeError) as exc:
            raise TicketError(f"cannot read the ticket {path}: {exc}") from None


def issue(authority: Identity, cluster: str, peer: str, role: str) -> Ticket:
    """Sign a ticket admitting ``peer`` as ``role`` in ``cluster``."""
    if role not in ROLES:
        raise TicketError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    try:
        public_key_of(peer)
    except BadPeerIdError as exc:
        raise TicketError(str(exc)) from None
    sig = base64.b64encode(authority.sign(ticket_bytes(authority.peer_id, cluster, peer, role))).decode("ascii")
    return Ticket(cluster, authority.peer_id, peer, role, sig)


class Gate:
    """Checks tickets for one cluster and authority. ``admits`` is pure apart from its cache."""

    CACHE = 4096

    def __init__(self, cluster: str, authority: str) -> None:
        try:
            public_key_of(authority)
        except BadPeerIdError as exc:
            raise TicketError(f"the cluster's authority is not a usable peer id: {exc}") from None
        self.cluster = cluster
        self.authority = authority
        self._known: dict[tuple[str, str, str], bool] = {}

    def admits(self, peer: str, role: str, sig: str) -> bool:
        """True when ``sig`` is this cluster's authority admitting ``peer`` as ``role``."""
        key = (peer, role, sig)
        known = self._known.get(key)
        if known is not None:
            return known
        try:
            raw = base64.b64decode(sig, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        good = len(raw) == 64 and verify(self.authority, ticket_bytes(self.authority, self.cluster, peer, role), raw)
        if len(self._known) >= self.CACHE:
            self._known.pop(next(iter(self._known)))
        self._known[key] = good
        return good

    def check(self, ticket: Ticket) -> None:
        """Raise TicketError naming the mismatch when ``ticket`` does not admit its holder here."""
        if ticket.cluster != self.cluster:
            raise TicketError(f"the ticket is for cluster {ticket.cluster!r}, not {self.cluster!r}")
        if ticket.authority != self.authority:
            raise TicketError(f"the ticket was signed by {ticket.authority[-8:]}, not this cluster's "
                              f"authority {self.authority[-8:]}")
        if not self.admits(ticket.peer, ticket.role, ticket.sig):
            raise TicketError(f"the ticket's signature does not admit {ticket.peer[-8:]} as {ticket.role}")


@dataclass(frozen=True)
class Credentials:
    """What a member needs to speak: its key, its ticket, and the gate of its cluster."""

    identity: Identity
    ticket: Ticket
    gate: Gate

    @property
    def role(self) -> str:
        return self.ticket.role

    @property
    def cluster(self) -> str:
        return self.gate.cluster

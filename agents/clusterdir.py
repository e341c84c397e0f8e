"""The operator's cluster directory and a member's admission files.

``swarm cluster init DIR`` makes::

    DIR/authority.key   the authority's ed25519 seed (hex, mode 0600): keep it secret
    DIR/cluster.json    {"name": C, "authority": A}: public, every member needs it
    DIR/members.json    every ticket issued: public; ``swarm submit`` reads its scorers

``swarm admit DIR --role R --data-dir MEMBER`` writes ``MEMBER/ticket.json`` (and
records it in ``members.json``); a member reads its ticket from its data
directory and refuses to start without one. Errors name the file and the command
that fixes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agents.core.admission import Credentials, Gate, Ticket, TicketError, issue
from agents.core.identity import Identity
from agents.durable import replace_durably
from agents.keyfile import KeyFileError, load_or_create

AUTHORITY_KEY = "authority.key"
CLUSTER_FILE = "cluster.json"
MEMBERS_FILE = "members.json"
TICKET_FILE = "ticket.json"


class AdmissionError(RuntimeError):
    """Admission files missing or wrong; the message says which and what to run."""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    replace_durably(path, text.encode("utf-8"), mode)


@dataclass(frozen=True)
class ClusterDir:
    path: Path
    name: str
    authority: Identity

    @classmethod
    def init(cls, path: Path, name: str, authority: Identity | None = None) -> ClusterDir:
        """Create the authority and the cluster files. Refuses to replace an existing authority."""
        if (path / AUTHORITY_KEY).exists():
            raise AdmissionError(f"{path} already holds a cluster authority ({AUTHORITY_KEY}); use it, or init "
                                 "another directory (a new authority would not admit the members already admitted)")
        path.mkdir(parents=True, exist_ok=True)
        authority = authority or Identity.generate()
        _write(path / AUTHORITY_KEY, authority.seed.hex() + "\n", 0o600)
        _write(path / CLUSTER_FILE, json.dumps({"name": name, "authority": authority.peer_id}, indent=2) + "\n")
        _write(path / MEMBERS_FILE, "[]\n")
        return cls(path, name, authority)

    @classmethod
    def open(cls, path: Path) -> ClusterDir:
        if not (path / AUTHORITY_KEY).exists():
            raise AdmissionError(f"{path} is not a cluster directory (no {AUTHORITY_KEY}); create one with "
                                 f"'swarm cluster init {path} --name NAME'")
        try:
            authority = Identity(bytes.fromhex((path / AUTHORITY_KEY).read_text().strip()))
            record = json.loads((path / CLUSTER_FILE).read_text())
            name = record["name"]
        except (OSError, ValueError, KeyError) as exc:
            raise AdmissionError(f"{path} holds a damaged cluster ({exc}); restore it from a backup") from None
        if record.get("authority") != authority.peer_id:
            raise AdmissionError(f"{path / CLUSTER_FILE} names another authority than {AUTHORITY_KEY}")
        return cls(path, name, authority)

    def admit(self, peer: str, role: str, name: str = "") -> Ticket:
        """Issue a ticket and record it in members.json (one entry per peer and role)."""
        try:
            ticket = issue(self.authority, self.name, peer, role)
        except TicketError as exc:
            raise AdmissionError(str(exc)) from None
        members = [m for m in self.members() if not (m["peer"] == peer and m["role"] == role)]
        members.append({"peer": peer, "role": role, "name": name})
        _write(self.path / MEMBERS_FILE, json.dumps(members, indent=2) + "\n")
        return ticket

    def admit_dir(self, data_dir: Path, role: str, name: str = "") -> Ticket:
        """Admit the member whose identity lives in ``data_dir`` (created if new); its ticket goes there."""
        try:
            identity = load_or_create(data_dir)
        except KeyFileError as exc:
            raise AdmissionError(str(exc)) from None
        ticket = self.admit(identity.peer_id, role, name or data_dir.name)
        write_ticket(data_dir, ticket)
        return ticket

    def members(self) -> list[dict[str, str]]:
        return read_members(self.path / MEMBERS_FILE)

    def scorers(self) -> tuple[str, ...]:
        return tuple(sorted({m["peer"] for m in self.members() if m["role"] == "scorer"}))


def read_members(path: Path) -> list[dict[str, str]]:
    try:
        members = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AdmissionError(f"cannot read the roster {path}: {exc}") from None
    if not isinstance(members, list) or not all(isinstance(m, dict) and {"peer", "role"} <= m.keys() for m in members):
        raise AdmissionError(f"{path} is not a members file (a list of {{peer, role}} written by 'swarm admit')")
    return members


def write_ticket(data_dir: Path, ticket: Ticket) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    _write(data_dir / TICKET_FILE, json.dumps(ticket.to_json(), indent=2) + "\n")


def credentials(data_dir: Path, identity: Identity, role: str | None = None, cluster: str | None = None) -> Credentials:
    """A member's credentials from ``data_dir/ticket.json``, checked against its own key.

    ``role``/``cluster``: what the command line asked for; a ticket for anything else is refused."""
    path = data_dir / TICKET_FILE
    fix = (f"the cluster's operator admits it with 'swarm admit CLUSTER_DIR --role {role or 'ROLE'} "
           f"--data-dir {data_dir}' (or 'swarm admit CLUSTER_DIR --role {role or 'ROLE'} --peer "
           f"{identity.peer_id} --out {path}')")
    if not path.exists():
        raise AdmissionError(f"{path} not found: member {identity.peer_id} holds no admission ticket; {fix}")
    try:
        ticket = Ticket.read(path)
    except TicketError as exc:
        raise AdmissionError(f"{exc}; {fix}") from None
    if ticket.peer != identity.peer_id:
        raise AdmissionError(f"{path} admits peer {ticket.peer}, but {data_dir}'s key is {identity.peer_id}; {fix}")
    if role is not None and ticket.role != role:
        raise AdmissionError(f"{path} admits this member as a {ticket.role}, not a {role}; {fix}")
    if cluster is not None and ticket.cluster != cluster:
        raise AdmissionError(f"{path} is a ticket for cluster {ticket.cluster!r}, not {cluster!r}")
    try:
        gate = Gate(ticket.cluster, ticket.authority)
        gate.check(ticket)
    except TicketError as exc:
        raise AdmissionError(f"{path}: {exc}; {fix}") from None
    return Credentials(identity, ticket, gate)

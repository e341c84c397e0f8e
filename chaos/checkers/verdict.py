"""What a checker answers: a verdict with evidence a person can follow.

Statuses: ``pass``; ``fail`` (a guarantee broke); ``stall`` (the plan did not
complete, but the faults left too few members of some role, so the guarantee
did not promise it would). Jepsen's ``unknown`` is ``stall``'s cousin: it is
never a pass by default and always says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "stall"]


@dataclass(frozen=True)
class Verdict:
    invariant: str
    status: Status
    evidence: str

    @property
    def passed(self) -> bool:
        return self.status != "fail"

    def to_json(self) -> dict[str, object]:
        return {"invariant": self.invariant, "passed": self.passed, "status": self.status,
                "evidence": self.evidence}


def short(peer_or_id: str) -> str:
    """A peer id's tail or an event id's head: enough to tell them apart in evidence."""
    return peer_or_id[-8:] if peer_or_id.startswith(("12D", "Qm")) else peer_or_id[:8]

"""The swarm member: signed events, the deterministic plan fold, storage, roles and models.

The names below are the public front door; everything else may move.
"""

from agents.core.clock import HybridClock, Timestamp
from agents.core.decode import decode_event
from agents.core.events import Event, EventRefused, sign_event
from agents.core.fold import fold
from agents.core.identity import Identity
from agents.core.tree import PlanTree
from agents.store import EventStore

__all__ = [
    "Event",
    "EventRefused",
    "EventStore",
    "HybridClock",
    "Identity",
    "PlanTree",
    "Timestamp",
    "decode_event",
    "fold",
    "sign_event",
]

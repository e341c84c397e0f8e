"""Keys and time of a simulated run: both derived from the seed, so a replay is byte for byte."""

from __future__ import annotations

import hashlib

from agents.core.identity import Identity

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: virtual time starts here


def identity_for(seed: int, role: str, index: int) -> Identity:
    """A member's key, derived from the seed: a replay signs the very same events."""
    return Identity(hashlib.sha256(f"swarm-sim/{seed}/{role}/{index}".encode()).digest())

"""A member's persistent identity: ``DATA_DIR/identity.key`` (the hex ed25519 seed, mode 0600).

The same data directory always gives the same peer id, so a restarted member
continues its own feed instead of appearing as a stranger.
"""

from __future__ import annotations

from pathlib import Path

from agents.core.identity import Identity
from agents.durable import replace_durably

KEY_NAME = "identity.key"


class KeyFileError(RuntimeError):
    pass


def load_or_create(data_dir: Path) -> Identity:
    path = data_dir / KEY_NAME
    if path.exists():
        text = path.read_text().strip()
        try:
            return Identity(bytes.fromhex(text))
        except ValueError:
            raise KeyFileError(
                f"{path} is not a 64-hex-digit ed25519 seed; restore it from a backup, or move it "
                "aside to start as a new member (the old identity's events stay valid)"
            ) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    identity = Identity.generate()
    replace_durably(path, (identity.seed.hex() + "\n").encode(), 0o600)
    return identity

"""Verify each peer's signed peer record once, not on every gossip RPC.

py-libp2p 0.8.1 attaches the sender's signed peer record (an envelope: its addresses,
signed by its key) to every pubsub RPC it sends, control messages and heartbeats
included, and the receiver decodes and checks the ed25519 signature of each one
(``libp2p.pubsub.utils.maybe_consume_signed_record``). A sender reuses one envelope
until its addresses change, so nearly every check repeats the last: with thirty
members on two cores, profiles put a tenth of each member's time there.

``install()`` wraps the function where pubsub and gossipsub call it: bytes already
verified from that same sender are accepted without checking again (the verdict of a
deterministic check on identical input cannot change, and the peerstore already holds
the record). A record seen for the first time, a changed one, or one from another
sender is checked by py-libp2p as before; only successes are remembered, at most
``REMEMBERED`` of them, so a flood of fresh records costs what it cost before, and
each for ``RECHECK_S`` (a check also renews the record's two-hour lease in the
peerstore, which must not lapse for a peer that is still sending it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
import libp2p.pubsub.utils as pubsub_utils

REMEMBERED = 4096
RECHECK_S = 600.0

_original = pubsub_utils.maybe_consume_signed_record
_verified: OrderedDict[tuple[str, bytes], float] = OrderedDict()  # -> when it was checked


def consume_once(msg: Any, host: Any, peer_id: Any = None) -> bool:
    """``maybe_consume_signed_record``, remembering the records it accepted."""
    if peer_id is None or not msg.HasField("senderRecord"):
        return _original(msg, host, peer_id)
    key = (str(peer_id), bytes(msg.senderRecord))
    now = time.monotonic()
    checked = _verified.get(key)
    if checked is not None and now - checked < RECHECK_S:
        _verified.move_to_end(key)
        return True
    accepted = _original(msg, host, peer_id)
    _verified.pop(key, None)
    if accepted:
        _verified[key] = now
        while len(_verified) > REMEMBERED:
            _verified.popitem(last=False)
    return accepted


def install() -> None:
    """Route pubsub's and gossipsub's calls through ``consume_once`` (idempotent)."""
    for module in (pubsub_module, gossipsub_module):
        if not hasattr(module, "maybe_consume_signed_record"):
            raise RuntimeError(f"{module.__name__} no longer calls maybe_consume_signed_record: "
                               "py-libp2p changed; revisit agents/net/peer_records.py")
    pubsub_module.maybe_consume_signed_record = consume_once  # type: ignore[attr-defined]
    gossipsub_module.maybe_consume_signed_record = consume_once  # type: ignore[attr-defined]

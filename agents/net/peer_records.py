"""Verify each peer's signed peer record once, and seal our own once, not per gossip RPC.

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

The sending side repeats itself too: for every RPC it sends, py-libp2p's
``env_to_send_in_RPC`` rebuilds the host's advertised addresses (multiaddr parsing and a
``/p2p`` suffix per address), compares them with the local record's and marshals the
envelope again, 50 us a call on a quiet machine, 0.2 ms among fifty members on two cores.
``install()`` also wraps that function where pubsub and gossipsub call it: a host's
marshalled record is reused while it is still the host's local record and for at most
``RESEAL_CHECK_S``, then py-libp2p is asked again (it reissues the record only when the
addresses changed). Never an older record than the local one: identify reissues it too, and
a receiver that holds a newer record of ours refuses an older one *and the whole RPC
carrying it* (``consume_peer_record`` compares sequence numbers). So a peer may see a new
address of ours ``RESEAL_CHECK_S`` late, in our newest record.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from typing import Any

import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
import libp2p.pubsub.utils as pubsub_utils
from libp2p.peer import peerstore

REMEMBERED = 4096
RECHECK_S = 600.0
RESEAL_CHECK_S = 5.0

_original = pubsub_utils.maybe_consume_signed_record
_original_seal = peerstore.env_to_send_in_RPC
_verified: OrderedDict[tuple[str, bytes], float] = OrderedDict()  # -> when it was checked
# host -> (when py-libp2p was last asked, the local record then, its marshalled bytes)
_sealed: weakref.WeakKeyDictionary[Any, tuple[float, Any, bytes]] = weakref.WeakKeyDictionary()
_clock = time.monotonic  # a module attribute, so a test can move time


def consume_once(msg: Any, host: Any, peer_id: Any = None) -> bool:
    """``maybe_consume_signed_record``, remembering the records it accepted."""
    if peer_id is None or not msg.HasField("senderRecord"):
        return _original(msg, host, peer_id)
    key = (str(peer_id), bytes(msg.senderRecord))
    now = _clock()
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


def seal_once(host: Any) -> tuple[bytes, bool]:
    """``env_to_send_in_RPC``, asking py-libp2p again only when the host's local record is
    another than the one marshalled (reissued) or ``RESEAL_CHECK_S`` have passed.

    The flag is py-libp2p's (a new record was issued); pubsub and gossipsub ignore it."""
    now = _clock()
    sealed = _sealed.get(host)
    if (sealed is not None and sealed[1] is host.get_peerstore().get_local_record()
            and now - sealed[0] < RESEAL_CHECK_S):
        return sealed[2], False
    envelope, issued = _original_seal(host)
    _sealed[host] = (now, host.get_peerstore().get_local_record(), envelope)
    return envelope, issued


def install() -> None:
    """Route pubsub's and gossipsub's calls through ``consume_once`` and ``seal_once``
    (idempotent)."""
    for module in (pubsub_module, gossipsub_module):
        for name in ("maybe_consume_signed_record", "env_to_send_in_RPC"):
            if not hasattr(module, name):
                raise RuntimeError(f"{module.__name__} no longer calls {name}: "
                                   "py-libp2p changed; revisit agents/net/peer_records.py")
        module.maybe_consume_signed_record = consume_once  # type: ignore[attr-defined]
        module.env_to_send_in_RPC = seal_once  # type: ignore[attr-defined]

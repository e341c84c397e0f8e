"""Member identities: ed25519 keys and the libp2p peer ids derived from them.

A peer id is the base58 text of an identity multihash over the protobuf-encoded
public key, exactly as libp2p computes it for ed25519 keys; the public key can
therefore be read back out of the peer id, and an event needs to carry nothing
but its author's peer id to be verifiable. This module uses PyNaCl directly
(which is what py-libp2p uses underneath) so that the core never imports libp2p;
``tests/agents/test_identity.py`` checks the ids agree with libp2p's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import base58
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

# protobuf PublicKey{Type: Ed25519 (1), Data: 32 bytes} = 08 01 12 20 <key>
_PROTO_ED25519_PREFIX = bytes([0x08, 0x01, 0x12, 0x20])
# identity multihash: code 0x00, length 0x24 (36 bytes of protobuf)
_IDENTITY_MULTIHASH_PREFIX = bytes([0x00, 0x24])
_PEER_ID_PREFIX = _IDENTITY_MULTIHASH_PREFIX + _PROTO_ED25519_PREFIX


class BadPeerIdError(ValueError):
    """A peer id that is not an inline ed25519 libp2p peer id."""


def peer_id_of(public_key: bytes) -> str:
    """The libp2p peer id (base58, ``12D3KooW...``) of a raw 32-byte ed25519 public key."""
    if len(public_key) != 32:
        raise BadPeerIdError(f"an ed25519 public key has 32 bytes, got {len(public_key)}")
    return base58.b58encode(_PEER_ID_PREFIX + public_key).decode("ascii")


def public_key_of(peer_id: str) -> bytes:
    """Read the raw ed25519 public key back out of a peer id.

    Raises BadPeerIdError when the text is not base58, or is a peer id of another
    key type (RSA and secp256k1 ids are hashes: the key cannot be recovered, so
    events by such authors could never be verified).
    """
    return _verify_key(peer_id).encode()


# A cluster has few authors and each signs many events: base58 decoding the same id
# for every event was a tenth of a late joiner's time. Bounded, so a flood of fresh
# keys only cycles it; a bad id raises and is never cached.
@lru_cache(maxsize=4096)
def _verify_key(peer_id: str) -> VerifyKey:
    try:
        raw = base58.b58decode(peer_id.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise BadPeerIdError(f"peer id {peer_id!r} is not base58") from exc
    if len(raw) != len(_PEER_ID_PREFIX) + 32 or not raw.startswith(_PEER_ID_PREFIX):
        raise BadPeerIdError(
            f"peer id {peer_id!r} is not an inline ed25519 libp2p peer id (12D3KooW...)"
        )
    return VerifyKey(raw[len(_PEER_ID_PREFIX) :])


def verify(peer_id: str, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is the author's ed25519 signature over ``message``."""
    try:
        _verify_key(peer_id).verify(message, signature)
    except (BadSignatureError, BadPeerIdError, ValueError):
        return False
    return True


@dataclass(frozen=True, repr=False)
class Identity:
    """A member's signing key. Its ``peer_id`` is the libp2p peer id of the same key."""

    seed: bytes

    def __post_init__(self) -> None:
        if len(self.seed) != 32:
            raise ValueError(f"an ed25519 seed has 32 bytes, got {len(self.seed)}")

    @classmethod
    def generate(cls) -> Identity:
        return cls(bytes(SigningKey.generate()))

    @cached_property
    def _signing_key(self) -> SigningKey:
        return SigningKey(self.seed)

    @cached_property
    def public_key(self) -> bytes:
        return bytes(self._signing_key.verify_key)

    @cached_property
    def peer_id(self) -> str:
        return peer_id_of(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return self._signing_key.sign(message).signature

    def __repr__(self) -> str:  # never print the seed
        return f"Identity({self.peer_id})"

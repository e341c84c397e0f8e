from __future__ import annotations

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from agents.core.identity import BadPeerIdError, Identity, peer_id_of, public_key_of, verify


def test_peer_id_is_the_one_libp2p_computes_for_the_same_key() -> None:
    seed = bytes(range(32))
    ours = Identity(seed)
    theirs = ID.from_pubkey(create_new_key_pair(seed).public_key).to_base58()
    assert ours.peer_id == theirs
    assert ours.peer_id.startswith("12D3KooW")


def test_public_key_round_trips_through_the_peer_id() -> None:
    identity = Identity.generate()
    assert public_key_of(identity.peer_id) == identity.public_key
    assert peer_id_of(identity.public_key) == identity.peer_id


def test_signature_verifies_only_for_its_author_and_message() -> None:
    alice, bob = Identity(b"a" * 32), Identity(b"b" * 32)
    signature = alice.sign(b"hello")
    assert verify(alice.peer_id, b"hello", signature)
    assert not verify(bob.peer_id, b"hello", signature)
    assert not verify(alice.peer_id, b"hullo", signature)


@pytest.mark.parametrize("bad", ["", "not base58 0OIl", "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"])
def test_peer_ids_that_hide_their_key_are_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(BadPeerIdError, match="peer id"):
        public_key_of(bad)


def test_repr_never_shows_the_seed() -> None:
    identity = Identity(b"s" * 32)
    assert "73" * 4 not in repr(identity) and identity.peer_id in repr(identity)

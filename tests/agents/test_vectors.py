"""This implementation passes the protocol's test vectors (tests/vectors/protocol.json).

The vectors are data a second implementation checks too (tests/js/); here they are
read back as a third party would, not regenerated, plus one check that the
committed file is still what the generator writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from agents.core.admission import Gate, ticket_bytes
from agents.core.decode import decode_event
from agents.core.events import EventRefused
from agents.core.fold import fold
from agents.core.identity import Identity

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "protocol.json").read_text())
CLUSTER = VECTORS["cluster"]


def test_the_committed_vectors_are_what_the_generator_writes() -> None:
    # in a fresh interpreter: Hypothesis (which draws the adversarial sets) carries state
    # from one test to the next, and the same generator run after other tests draws others
    run = subprocess.run([sys.executable, "-m", "tests.vectors.generate", "--check"], cwd=Path(__file__).parents[2],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:] + "\nrun: make vectors"


@pytest.mark.parametrize("key", VECTORS["keys"], ids=lambda k: k["name"])
def test_keys_give_the_peer_ids_listed(key) -> None:
    seed = hashlib.sha256(key["seed_text"].encode()).digest()
    assert seed.hex() == key["seed"]
    identity = Identity(seed)
    assert identity.public_key.hex() == key["public_key"]
    assert identity.peer_id == key["peer"]


@pytest.mark.parametrize("ticket", VECTORS["tickets"], ids=lambda t: t["role"])
def test_tickets_verify_and_their_bytes_are_as_listed(ticket) -> None:
    assert ticket_bytes(CLUSTER["authority"], CLUSTER["name"], ticket["peer"], ticket["role"]).decode() \
        == ticket["bytes"]
    gate = Gate(CLUSTER["name"], CLUSTER["authority"])
    assert gate.admits(ticket["peer"], ticket["role"], ticket["sig"])
    assert not gate.admits(ticket["peer"], "client" if ticket["role"] != "client" else "scorer", ticket["sig"])


@pytest.mark.parametrize("vector", VECTORS["events"], ids=lambda e: f"{e['kind']}-{e['id'][:8]}")
def test_every_event_decodes_to_its_id_and_signature(vector) -> None:
    event = decode_event(vector["wire"].encode())
    assert hashlib.sha256(vector["signing_bytes"].encode()).hexdigest() == vector["id"] == event.id
    assert event.sig == vector["sig"]
    assert event.to_wire().decode() == vector["wire"]
    assert Gate(CLUSTER["name"], CLUSTER["authority"]).admits(event.author, event.role, event.ticket)


@pytest.mark.parametrize("vector", VECTORS["refused"], ids=lambda r: r["name"])
def test_every_refusal_vector_is_refused_by_its_rule(vector) -> None:
    raw = base64.b64decode(vector["base64"])
    if vector["rule"] == "ticket":
        event = decode_event(raw)
        assert not Gate(CLUSTER["name"], CLUSTER["authority"]).admits(event.author, event.role, event.ticket)
        return
    with pytest.raises(EventRefused) as refused:
        decode_event(raw)
    assert refused.value.rule == vector["rule"]


@pytest.mark.parametrize("vector", VECTORS["sets"], ids=lambda s: s["name"][:30])
def test_every_event_set_folds_to_its_digest_in_any_order(vector) -> None:
    by_id = {v["id"]: decode_event(v["wire"].encode()) for v in VECTORS["events"]}
    events = [by_id[i] for i in vector["ids"]]
    for seed in range(3):
        random.Random(seed).shuffle(events)
        tree = fold(events + events[: len(events) // 3])
        assert tree.digest == vector["digest"]
        assert tree.complete == vector["complete"]
        assert sorted(tree.equivocators) == vector["equivocators"]
        assert {n.id: n.split for n in tree.nodes.values() if n.split} == vector["splits"]
        assert {n.id: n.result for n in tree.nodes.values() if n.result} == vector["results"]


ADVERSARIAL = VECTORS["adversarial"]


@pytest.mark.parametrize("vector", ADVERSARIAL["sets"], ids=lambda s: s["name"])
def test_every_adversarial_set_folds_to_its_digest_in_any_order(vector) -> None:
    gate = Gate(ADVERSARIAL["cluster"]["name"], ADVERSARIAL["cluster"]["authority"])
    by_id = {}
    for wire in ADVERSARIAL["events"]:
        event = decode_event(wire.encode())
        assert gate.admits(event.author, event.role, event.ticket)
        by_id[event.id] = event
    events = [by_id[i] for i in vector["ids"]]
    for seed in range(3):
        random.Random(seed).shuffle(events)
        tree = fold(events)
        assert tree.digest == vector["digest"]
        assert sorted(tree.equivocators) == vector["equivocators"]
        assert {n.id: n.split for n in tree.nodes.values() if n.split} == vector["splits"]
        assert {n.id: n.result for n in tree.nodes.values() if n.result} == vector["results"]

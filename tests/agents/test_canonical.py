"""Canonical bytes are the one encoding every id, signature and digest is computed over:
these tests hold the fast encoder to the reference one (Python's own ``json`` with sorted
keys, compact separators, UTF-8), which the protocol text and the JS member also follow."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.core.canonical import NotCanonicalError, canonical_bytes


def reference(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


# every code point but the surrogates, control characters and escapes included
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(VALUES)
def test_the_same_bytes_as_the_reference_encoding(value: object) -> None:
    assert canonical_bytes(value) == reference(value)


def test_every_single_character_is_written_as_the_reference_writes_it() -> None:
    # the escapes (\b, \f, \n, \r, \t, \u00XX for the other controls, \" and \\) are where
    # two encoders most often differ
    for code in range(0x10000):
        if not 0xD800 <= code < 0xE000:
            assert canonical_bytes({chr(code): chr(code)}) == reference({chr(code): chr(code)}), hex(code)


@pytest.mark.parametrize("value", [1.5, {"a": [2.0]}, {1: "non-string key"}])
def test_what_has_no_canonical_encoding_is_refused(value: object) -> None:
    with pytest.raises(NotCanonicalError):
        canonical_bytes(value)


@pytest.mark.parametrize("value", ["\ud800", {"k": "a\udfffb"}, 2**64])
def test_what_no_encoder_can_write_is_refused_by_name(value: object) -> None:
    with pytest.raises(NotCanonicalError, match="no canonical encoding"):
        canonical_bytes(value, check=False)

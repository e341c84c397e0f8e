"""Canonical bytes: the one encoding that ids, signatures and digests are computed over.

JSON with sorted keys, no insignificant whitespace, UTF-8, and no floats: two
members that hold the same values always produce the same bytes, whatever
order their dictionaries were built in.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


class NotCanonicalError(ValueError):
    """A value that has no canonical encoding (a float, a non-string key, ...)."""


def _reject_floats(value: Any, path: str = "$") -> None:
    if isinstance(value, float):
        raise NotCanonicalError(
            f"{path} is a float ({value!r}); canonical encoding allows only integers, "
            "because float formatting differs between implementations"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonicalError(f"{path} has a non-string key {key!r}")
            _reject_floats(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _reject_floats(item, f"{path}[{index}]")


def canonical_bytes(value: Any, *, check: bool = True) -> bytes:
    """Encode ``value`` (dicts, lists, str, int, bool, None) as canonical JSON bytes.

    ``check=False`` skips the float scan, for records built only from typed
    int and str fields (the tree digest), where it would cost half the fold.
    """
    if check:
        _reject_floats(value)
    try:
        # the same bytes as ``json.dumps(sort_keys=True, separators=(",", ":"),
        # ensure_ascii=False)`` (tests/agents/test_canonical.py holds them to it), a fifth of
        # the cost: every event received is encoded once more to check its bytes
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # a lone surrogate, an integer past 64 bits, a non-string key
        raise NotCanonicalError(f"no canonical encoding: {exc}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

"""An event's wire bytes read strictly (PROTOCOL.md, section 2): the only way bytes from a
peer, or from our own store, become an ``Event``.

``decode_event`` checks, in order, size, JSON, schema, canonical bytes, the author's role
for the kind, the chain fields, the peer id, the recomputed id and the signature, and
refuses with the rule that failed (``EventRefused.rule``: what the intake counts).
``decode_unverified`` stops before the signature, the costly half, so that the signature
check can run apart (``agents.decoding``, ``agents.verifier``). The schemas and the
signing side are ``agents.core.events``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pydantic import ValidationError

from agents.core.canonical import canonical_bytes, sha256_hex
from agents.core.events import MAX_EVENT_BYTES, SIGNING_DOMAIN, Event, EventRefused, check_envelope
from agents.core.identity import BadPeerIdError, public_key_of, verify


def _describe(raw: Any) -> str:
    if isinstance(raw, dict):
        claimed = raw.get("id")
        if isinstance(claimed, str):
            return claimed[:16]
        author, seq = raw.get("author"), raw.get("seq")
        if isinstance(author, str):
            return f"{author[-8:]}#{seq}"
    return "(unparsed)"


def _schema_detail(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"]) or "(event)"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


class _FractionFound(ValueError):
    pass


def _no_fractions(text: str) -> int:
    raise _FractionFound(text)


def _fraction(raw: bytes) -> str | None:
    """Why ``raw`` is not this protocol's JSON for having a number with a fraction or an
    exponent (``2.0``, ``2e0``): there are only integers. None when it has none."""
    try:
        json.loads(raw, parse_float=_no_fractions, parse_constant=_no_fractions)
    except _FractionFound as found:
        return f"the number {found} has a fraction or an exponent; this protocol's numbers are integers"
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return None


def _missing(sent: Any, canonical: Any, path: str) -> str | None:
    """The first field the canonical encoding has and the sender left out."""
    if isinstance(sent, dict) and isinstance(canonical, dict):
        for key in sorted(canonical):
            if key not in sent:
                return f"{path}{key}"
            found = _missing(sent[key], canonical[key], f"{path}{key}.")
            if found:
                return found
    if isinstance(sent, list) and isinstance(canonical, list):
        for index, (a, b) in enumerate(zip(sent, canonical, strict=False)):
            found = _missing(a, b, f"{path}{index}.")
            if found:
                return found
    return None


def _not_canonical(raw: bytes, canonical: bytes, ref: str) -> EventRefused:
    """The refusal for bytes that parsed to valid values but are not their canonical encoding:
    a fraction is ``json``, a left-out field ``schema`` (no field is implied by its absence),
    anything else (spacing, key order, a duplicate key, an escape) ``canonical``."""
    if (fraction := _fraction(raw)) is not None:
        return EventRefused("json", fraction, ref)
    missing = _missing(json.loads(raw), json.loads(canonical), "")
    if missing is not None:
        return EventRefused("schema", f"{missing}: field required (no field is implied by its absence)", ref)
    return EventRefused("canonical", _first_difference(raw, canonical), ref)


def _first_difference(raw: bytes, canonical: bytes) -> str:
    """Where received bytes first depart from the one canonical encoding of what they say."""
    at = next((i for i, (a, b) in enumerate(zip(raw, canonical, strict=False)) if a != b), min(len(raw), len(canonical)))
    got = raw[max(0, at - 12):at + 12].decode("utf-8", "replace")
    want = canonical[max(0, at - 12):at + 12].decode("utf-8", "replace")
    return (f"its bytes are not the canonical encoding of its values (PROTOCOL.md, section 2): at byte {at} "
            f"found {got!r}, canonical is {want!r}")


def decode_event(raw: bytes, *, verify_signature: bool = True) -> Event:
    """Parse, validate and authenticate one event from its wire bytes.

    Checks, in order: size, JSON, schema (strict: no extra fields, no coercion),
    canonical bytes (the received bytes must be exactly the canonical encoding of
    the values they carry: no whitespace, sorted keys, no duplicate keys, no
    ``2.0`` for ``2``, no omitted field), author role against kind, the chain fields, the peer id, the recomputed id,
    and the signature. Raises EventRefused naming the rule that failed.
    ``verify_signature=False`` is only for events read back from our own store,
    which were verified before they were written.
    """
    event, message = decode_unverified(raw)
    if verify_signature:
        check_signature(event, message)
    return event


def decode_unverified(raw: bytes) -> tuple[Event, bytes]:
    """Every check of ``decode_event`` but the signature's; returns the event and the bytes
    its signature must verify over (``check_signature``), so that the two can run apart: the
    signature check is the costly half, and the one that runs outside the GIL."""
    if len(raw) > MAX_EVENT_BYTES:
        raise EventRefused("size", f"{len(raw)} bytes, at most {MAX_EVENT_BYTES} allowed")
    try:
        event = Event.model_validate_json(raw)
    except ValidationError as exc:
        try:
            ref = _describe(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError) as json_error:
            raise EventRefused("json", f"not JSON: {json_error}") from None
        except RecursionError:  # nesting no event has; the schema parser stops at 200 levels
            raise EventRefused("json", "nested too deeply") from None
        if any(item["type"] == "json_invalid" for item in exc.errors()):
            raise EventRefused("json", _schema_detail(exc), ref) from None
        if (fraction := _fraction(raw)) is not None:
            raise EventRefused("json", fraction, ref) from None
        raise EventRefused("schema", _schema_detail(exc), ref) from None
    ref = event.id[:16]
    values = event.model_dump(mode="json", exclude={"id", "sig"})
    # no float scan: the strict schema has no field a float can reach (``2.0`` for an int
    # is refused above, as ``json``), and the scan was a tenth of decoding
    unsigned = canonical_bytes(values, check=False)
    canonical = _with_id_and_sig(unsigned, event.id, event.sig)
    if raw != canonical:
        raise _not_canonical(raw, canonical, ref)
    event.__pydantic_private__["_wire"] = canonical  # not ``event._wire =``: pydantic's slow path, as in ``to_wire``
    check_envelope(event)
    try:
        public_key_of(event.author)
    except BadPeerIdError as exc:
        raise EventRefused("author", str(exc), ref) from None
    message = SIGNING_DOMAIN + unsigned
    recomputed = sha256_hex(message)
    if recomputed != event.id:
        raise EventRefused(
            "id", f"claims id {event.id[:16]} but its content hashes to {recomputed[:16]}", ref
        )
    return event, message


def _with_id_and_sig(unsigned: bytes, event_id: str, sig: str) -> bytes:
    """The canonical bytes of the whole event from those of its unsigned part, without encoding
    it twice: with sorted keys ``id`` goes just before ``prev`` and ``sig`` just before
    ``ticket``. The last ``,"prev":`` and ``,"ticket":`` are the top-level keys: only the
    role, seq, ticket (base64) and v follow them, and none can hold a quote. Both inserted
    values are hex and base64 (the schema's patterns), which JSON never escapes."""
    at_prev = unsigned.rindex(b',"prev":')
    at_ticket = unsigned.rindex(b',"ticket":')
    return b"".join((unsigned[:at_prev], b',"id":"', event_id.encode(), b'"', unsigned[at_prev:at_ticket],
                     b',"sig":"', sig.encode(), b'"', unsigned[at_ticket:]))


def check_signature(event: Event, message: bytes) -> None:
    """Raise EventRefused unless ``event.sig`` is its author's signature over ``message``
    (from ``decode_unverified``)."""
    if not verify(event.author, message, signature_bytes(event)):
        raise bad_signature(event)


def signature_bytes(event: Event) -> bytes:
    """The event's signature decoded; EventRefused when ``sig`` is not base64."""
    try:
        return base64.b64decode(event.sig, validate=True)
    except (binascii.Error, ValueError):
        raise EventRefused("signature", "sig is not base64", event.id[:16]) from None


def bad_signature(event: Event) -> EventRefused:
    """The refusal of an event whose signature does not verify against its author."""
    return EventRefused("signature", f"signature does not verify against author {event.author}", event.id[:16])

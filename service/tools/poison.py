"""A catalogue of malformed messages, each with the dead-letter reason the service must give it. Pure.

Used by the load generator (``--poison-ratio``), the tests and the demo, so all three agree on what "bad
input" means.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec

from service.errors import Reason

POISON_KINDS: dict[str, Reason] = {
    "not_json": Reason.INVALID_JSON,
    "truncated_json": Reason.INVALID_JSON,
    "nan_literal": Reason.INVALID_JSON,
    "infinity_literal": Reason.INVALID_JSON,
    "bad_utf8": Reason.INVALID_UTF8,
    "truncated_utf8": Reason.INVALID_UTF8,
    "wrong_type": Reason.INVALID_EVENT,
    "missing_field": Reason.INVALID_EVENT,
    "wrong_field_type": Reason.INVALID_EVENT,
    "deep_nesting": Reason.INVALID_EVENT,
    "empty": Reason.EMPTY_VALUE,
    "null": Reason.EMPTY_VALUE,
    "too_large": Reason.VALUE_TOO_LARGE,
}

WRONG_TYPE_VALUES: tuple[bytes, ...] = (b"[1, 2, 3]", b'"just a string"', b"42", b"true", b"null")
"""Well-formed JSON documents that are not objects; ``wrong_type`` picks one at random."""

DEEP_NESTING_LEVELS = 100_000
"""How deep ``deep_nesting`` nests arrays when its size budget allows: far beyond any interpreter's
recursion limit, so decoding it must fail with RecursionError (mapped to invalid_event), never crash."""


def make_poison(
    kind: str,
    event: dict[str, Any],
    field: str,
    too_large_bytes: int | None,
    rng: random.Random | None = None,
) -> bytes | None:
    """A malformed variant of the good ``event``; ``field`` is one the processor requires.

    ``too_large_bytes`` is the padding of ``too_large`` (callers pass more than the size limit, at most
    twice it). ``deep_nesting`` stays within half of it (so under the limit), or uses the full
    :data:`DEEP_NESTING_LEVELS` when it is None.
    """
    good = msgspec.json.encode(event)
    match kind:
        case "not_json":
            return b"ERROR this line is not JSON at all"
        case "truncated_json":
            return good[: len(good) // 2]
        case "nan_literal":
            return good.replace(b"{", b'{"' + field.encode() + b'": NaN, ', 1)
        case "infinity_literal":
            return good.replace(b"{", b'{"' + field.encode() + b'": -Infinity, ', 1)
        case "bad_utf8":
            return b'{"' + field.encode() + b'": "caf\xc3\x28 \xff"}'
        case "truncated_utf8":
            # Cut off after the first byte of a two-byte character: bad text whatever the parser.
            return good[: len(good) // 2] + "é".encode()[:1]
        case "wrong_type":
            return (rng or random).choice(WRONG_TYPE_VALUES)
        case "missing_field":
            return msgspec.json.encode({k: v for k, v in event.items() if k != field})
        case "wrong_field_type":
            return msgspec.json.encode(event | {field: {"nested": [field]}})
        case "deep_nesting":
            return _deep_nesting(event, field, too_large_bytes)
        case "empty":
            return b""
        case "null":
            return None
        case "too_large":
            if too_large_bytes is None:
                raise ValueError("the too_large poison kind needs too_large_bytes")
            return msgspec.json.encode(event | {"padding": "x" * too_large_bytes})
    raise ValueError(f"unknown poison kind {kind!r}; known: {sorted(POISON_KINDS)}")


def _deep_nesting(event: dict[str, Any], field: str, too_large_bytes: int | None) -> bytes:
    """The event without ``field``, led by an extra field of nested arrays.

    A processor skips unknown fields, but skipping still descends into them: deep enough, that is a
    RecursionError; shallower (a small size budget, or an interpreter with a high C recursion limit), the
    required field is still missing. Either way the reason is invalid_event.
    """
    rest = msgspec.json.encode({k: v for k, v in event.items() if k != field})
    levels = DEEP_NESTING_LEVELS
    if too_large_bytes is not None:
        budget = too_large_bytes // 2 - len(rest) - len(b'{"nested": , }')
        levels = max(1, min(levels, budget // 2))
    nested = b"[" * levels + b"]" * levels
    tail = b", " + rest[1:] if len(rest) > 2 else b"}"
    return b'{"nested": ' + nested + tail

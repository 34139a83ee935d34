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
    "bad_utf8": Reason.INVALID_UTF8,
    "wrong_type": Reason.INVALID_EVENT,
    "missing_field": Reason.INVALID_EVENT,
    "wrong_field_type": Reason.INVALID_EVENT,
    "empty": Reason.EMPTY_VALUE,
    "null": Reason.EMPTY_VALUE,
    "too_large": Reason.VALUE_TOO_LARGE,
}


def make_poison(kind: str, event: dict[str, Any], field: str, too_large_bytes: int) -> bytes | None:
    """A malformed variant of the good ``event``; ``field`` is one the processor requires."""
    good = msgspec.json.encode(event)
    match kind:
        case "not_json":
            return b"ERROR this line is not JSON at all"
        case "truncated_json":
            return good[: len(good) // 2]
        case "nan_literal":
            return good.replace(b"{", b'{"' + field.encode() + b'": NaN, ', 1)
        case "bad_utf8":
            return b'{"' + field.encode() + b'": "caf\xc3\x28 \xff"}'
        case "wrong_type":
            return random.choice([b"[1, 2, 3]", b'"just a string"', b"42", b"true"])
        case "missing_field":
            return msgspec.json.encode({k: v for k, v in event.items() if k != field})
        case "wrong_field_type":
            return msgspec.json.encode(event | {field: {"nested": [field]}})
        case "empty":
            return b""
        case "null":
            return None
        case "too_large":
            return msgspec.json.encode(event | {"padding": "x" * too_large_bytes})
    raise ValueError(f"unknown poison kind {kind!r}; known: {sorted(POISON_KINDS)}")

"""Field paths: ``kubernetes.labels.app``, ``resource.service.name``. Pure.

A path is a list of keys separated by dots; ``\\.`` is a dot inside a key and ``\\\\`` a backslash. Keys
may themselves contain dots as shippers write them (OpenTelemetry's ``service.name``, Kubernetes'
``app.kubernetes.io/name``), so lookup takes, at each level, the LONGEST run of the remaining keys that
names an entry: ``resource.service.name`` finds ``{"resource": {"service.name": "checkout"}}`` and
``{"resource": {"service": {"name": "checkout"}}}`` alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final


class PathError(ValueError):
    """A path that cannot be parsed: empty, an empty key, or a dangling backslash."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What :func:`lookup` returns for a path that names nothing (distinct from a JSON ``null``)."""


def parse_path(text: str) -> tuple[str, ...]:
    """``a.b\\.c`` -> ``("a", "b.c")``. Raises PathError for an empty path or key, or a trailing ``\\``."""
    keys: list[str] = []
    key: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise PathError("ends in a lone backslash")
            key.append(escaped)
        elif char == ".":
            keys.append("".join(key))
            key = []
        else:
            key.append(char)
    keys.append("".join(key))
    if not all(keys):
        raise PathError("has an empty key (use \\. for a dot inside a key)")
    return tuple(keys)


def parse_paths(texts: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``(text, path)`` for each of ``texts``; PathError naming the entry (``entry 2 has an empty key``)
    when there are several."""
    paths = []
    for number, text in enumerate(texts, 1):
        try:
            paths.append((text, parse_path(text)))
        except PathError as exc:
            raise PathError(f"entry {number} {exc}" if len(texts) > 1 else str(exc)) from None
    return paths


def is_flat(path: tuple[str, ...]) -> bool:
    """One key: the JSON fast path can decode it with a typed decoder."""
    return len(path) == 1


def lookup(fields: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in nested mappings, or MISSING. Longest matching key first (see above); when
    that leads nowhere, shorter ones are tried (``a.b.c`` in ``{"a.b": 1, "a": {"b": {"c": 2}}}`` is 2)."""
    if not isinstance(fields, Mapping):
        return MISSING
    if len(path) == 1:  # the common case, and the end of every path
        return fields.get(path[0], MISSING)
    for cut in range(len(path), 0, -1):
        key = path[0] if cut == 1 else ".".join(path[:cut])
        if key in fields:
            found = fields[key] if cut == len(path) else lookup(fields[key], path[cut:])
            if found is not MISSING:
                return found
    return MISSING


class Picker:
    """Copies chosen fields out of an item for its result (``MICROBATCH_OUTPUT__INCLUDE_FIELDS``): a dict
    keyed by the paths as written; paths that name nothing are left out."""

    def __init__(self, paths: list[str]) -> None:
        self._paths = parse_paths(paths)

    def __bool__(self) -> bool:
        return bool(self._paths)

    def pick(self, fields: Any) -> dict[str, Any]:
        picked = {}
        for text, path in self._paths:
            value = lookup(fields, path)
            if value is not MISSING:
                picked[text] = value
        return picked

"""What every settings section shares: the env naming, list and topic types, and cross-field bounds."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo
from pydantic_settings import NoDecode

ENV_PREFIX = "MICROBATCH_"
ENV_DELIMITER = "__"

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def env_name(loc: tuple[str | int, ...]) -> str:
    """``("batch", "max_size", ...)`` -> ``MICROBATCH_BATCH__MAX_SIZE``: the name a user has to fix.
    Settings are two levels deep; anything further in the location is inside the value itself."""
    return ENV_PREFIX + ENV_DELIMITER.join(str(p).upper() for p in loc[:2])


class Section(BaseModel):
    """One concern's settings: frozen, and a misspelt field (``MICROBATCH_BATCH__MAX_SIZ``) is an error,
    not ignored. :meth:`env` names a field's variable, derived from where the section sits in
    ``Settings``, so no variable name is typed by hand.

    Each field's docstring is its documentation, the one source of it: pydantic keeps it as the field's
    ``description``, and docs/CONFIG.md, ``.env.example`` and ``microbatch config`` are rendered from it
    (``service.config.reference``). Say what the setting does and its unit."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    section: ClassVar[str] = ""
    """The section's name in ``Settings`` (``batch``); set by ``Settings`` itself."""

    @classmethod
    def env(cls, field: str) -> str:
        """The environment variable of ``field``. Raises KeyError for a field this section lacks, so a
        typo in the code fails the first test that reaches it."""
        if field not in cls.model_fields:
            raise KeyError(f"{cls.__name__} has no field {field!r}")
        return env_name((cls.section, field))


def split_list(value: object) -> object:
    """Accept ``a,b,c`` as well as a JSON list, so ``MICROBATCH_INPUT__TOPICS=logs,metrics`` just works."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]
"""A list setting that takes ``a,b,c`` or a JSON list (never decoded as JSON by pydantic-settings)."""

TOPIC_RULE = "letters, digits, '.', '_', '-'; 1-249 characters; not '.' or '..'"


def legal_topic(name: str) -> bool:
    return bool(_TOPIC_RE.match(name)) and name not in {".", ".."}


def _check_topic(name: str) -> str:
    if not legal_topic(name):
        raise ValueError(f"not a legal Kafka topic name ({TOPIC_RULE})")
    return name


TopicName = Annotated[str, AfterValidator(_check_topic)]


def not_below(section: type[Section], value: int, info: ValidationInfo, other: str) -> int:
    """Cross-field bound for a field validator: ``value`` may not be below the already validated field
    ``other`` of the same section."""
    low: Any = info.data.get(other)
    if low is not None and value < low:
        raise ValueError(f"must be >= {section.env(other)}")
    return value

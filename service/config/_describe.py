"""Each setting as a reader sees it: its variable, type, default and one-line description, all read from the
field itself (its docstring is its documentation), and the short list of settings a new user sets first.

Texts keep the docstrings' ``code`` markup: :func:`markdown` turns it into Markdown, :func:`plain` drops it
for a terminal.
"""

from __future__ import annotations

import json
import re
import textwrap
import types
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from service.config._base import Section
from service.config._kafka import REDACTED, KafkaSettings, private_option
from service.config._root import sections
from service.config._sections import (
    BatchSettings,
    InputSettings,
    LogSettings,
    MetricsSettings,
    ModelSettings,
    OutputSettings,
)

COMMON: tuple[str, ...] = (
    KafkaSettings.env("bootstrap_servers"),
    InputSettings.env("topics"),
    InputSettings.env("format"),
    OutputSettings.env("topic"),
    ModelSettings.env("name"),
    ModelSettings.env("path"),
    BatchSettings.env("min_size"),
    BatchSettings.env("max_size"),
    BatchSettings.env("max_wait_ms"),
    KafkaSettings.env("security_protocol"),
    KafkaSettings.env("sasl_mechanism"),
    KafkaSettings.env("sasl_username"),
    KafkaSettings.env("sasl_password"),
    MetricsSettings.env("port"),
    LogSettings.env("level"),
)
"""The settings a new user sets first, in the order they would: the one place that says which are common
(docs/CONFIG.md's first table, ``.env.example``, ``microbatch run --help``, ``microbatch config``)."""


@dataclass(frozen=True, slots=True)
class RunNeeds:
    """A setting with a default that ``run`` still refuses (``service.config._run``, the model choice)."""

    default: str
    """What the reference shows instead of the default."""
    example: str
    """The value ``.env.example`` sets, for the user to change."""


RUN_NEEDS: Mapping[str, RunNeeds] = {
    InputSettings.env("topics"): RunNeeds("required", "logs"),
    ModelSettings.env("name"): RunNeeds(f"required unless ``{ModelSettings.env('path')}``", "log-classifier"),
}
"""What the reference says of the settings ``run`` needs: the checks themselves are ``run_problems`` and
``choose_model``; ``microbatch config`` runs those."""

UNSET = "unset"
MASK = REDACTED


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One setting, described: every text one line, with ``code`` markup."""

    variable: str
    section: str
    field: str
    type: str
    default: str
    description: str
    secret: bool
    common: bool


def settings_info() -> list[SettingInfo]:
    """Every setting, section by section in the order of ``Settings``, fields in declaration order."""
    return [describe(section, field) for section, cls in sections().items() for field in cls.model_fields]


def common_settings() -> list[SettingInfo]:
    """The :data:`COMMON` settings, in that order."""
    by_name = {info.variable: info for info in settings_info()}
    return [by_name[name] for name in COMMON]


def describe(section: str, field: str) -> SettingInfo:
    cls: type[Section] = sections()[section]
    info = cls.model_fields[field]
    variable = cls.env(field)
    needs = RUN_NEEDS.get(variable)
    return SettingInfo(
        variable=variable,
        section=section,
        field=field,
        type=type_text(info.annotation),
        default=needs.default if needs else default_text(info),
        description=" ".join((info.description or "").split()),
        secret=is_secret(info),
        common=variable in COMMON,
    )


def is_secret(info: FieldInfo) -> bool:
    return SecretStr in _members(info.annotation)


def type_text(annotation: Any) -> str:
    """``int``, ``float``, ``str``, ``bool``, ``path``, ``list[str]``, ``JSON object``, ``secret``, or
    ``one of ``a``, ``b``...`` (an optional setting reads as its type: unset is its default)."""
    members = [m for m in _members(annotation) if m is not type(None)]
    if len(members) != 1:
        return " or ".join(type_text(m) for m in members)
    kind = members[0]
    origin = get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(f"``{v}``" for v in get_args(kind))
    if kind is SecretStr:
        return "secret"
    if isinstance(kind, type) and issubclass(kind, Path):
        return "path"
    if origin is list:
        return f"list[{type_text(get_args(kind)[0])}]"
    if origin is dict:
        return "JSON object"
    return kind.__name__ if isinstance(kind, type) else str(kind)


def _members(annotation: Any) -> list[Any]:
    """The types of a union (``X | None``: both), Annotated metadata dropped."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def default_text(info: FieldInfo) -> str:
    """The default as a user would write it; never a secret's value."""
    default = info.get_default(call_default_factory=True)
    if default is not None and is_secret(info):
        return MASK
    return value_text(default)


def value_text(value: object) -> str:
    """A setting's value as it would be written in its variable: lists ``a,b,c``, maps as JSON, booleans
    ``true``/``false``, whole floats without ``.0``; ``unset`` for None; secrets and the values of
    credential options in a map (``sasl.password``) masked."""
    if value is None:
        return UNSET
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return ",".join(value_text(v) for v in value) if value else "none"
    if isinstance(value, dict):
        shown = {k: MASK if private_option(str(k)) else v for k, v in value.items()}
        return json.dumps(shown, separators=(",", ":"))
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def markdown(text: str) -> str:
    """Docstring markup to Markdown: ````code```` -> ```code```."""
    return text.replace("``", "`")


def plain(text: str) -> str:
    """Docstring markup dropped, for a terminal."""
    return text.replace("``", "")


def common_help(width: int = 100) -> str:
    """The common settings for ``microbatch run --help``: each variable with its default, and the first
    sentence of its description; then where the rest is."""
    lines = ["common settings (environment variables, or a .env file in the working directory):"]
    for info in common_settings():
        default = info.default if info.variable in RUN_NEEDS else f"default: {info.default}"
        lines.append(f"  {info.variable} ({plain(default)})")
        lines += textwrap.wrap(
            plain(first_sentence(info.description)),
            width,
            initial_indent=" " * 6,
            subsequent_indent=" " * 6,
            break_on_hyphens=False,
        )
    lines += [
        "",
        *textwrap.wrap(
            "'microbatch config' prints the settings in effect, where each came from, and every problem "
            "with them; docs/CONFIG.md describes every setting.",
            width,
        ),
    ]
    return "\n".join(lines)


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not ``e.g.`` nor ``...``)."""
    match = re.search(r"(?<![.\s]\w)(?<!\.\.)\.(\s|$)", text)
    return text if match is None else text[: match.start() + 1]

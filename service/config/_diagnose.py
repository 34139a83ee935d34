"""Every problem with the settings at once, and where each value came from: what ``microbatch config`` shows.

:func:`service.config.load_settings` stops at the first problem, which is right for ``run``; a user fixing a
configuration wants the whole list. This reads the same sources the same way (pydantic-settings' own
environment and ``.env`` sources), validates each section on its own, and goes on: a field that fails is
reported, then left out so that the rest of its section can still be checked and shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_settings import DotEnvSettingsSource, EnvSettingsSource

from service.config._base import ENV_DELIMITER, ENV_PREFIX, Section
from service.config._describe import MASK, SettingInfo, settings_info, value_text
from service.config._kafka import SECRET_FILES
from service.config._load import (
    config_errors,
    dotenv_variables,
    env_file,
    environment_variables,
    misnamed,
    undecodable,
    unknown_sections,
)
from service.config._root import Settings, sections
from service.config._run import run_problems
from service.errors import ConfigError

Source = Literal["default", "environment", ".env", "file"]
"""Where a value came from: its default, the environment, the ``.env`` file, or (a secret) the file its
``*_FILE`` setting names."""

Check = Callable[[Settings], list[ConfigError]]
"""A start-up check beyond the settings' own (``run_problems``; the model choice, which lives with the
models)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing to fix: the variable, and what is wrong with it (never its value)."""

    setting: str
    message: str

    @classmethod
    def of(cls, error: ConfigError) -> Problem:
        return cls(error.setting, str(error).removeprefix(f"invalid setting {error.setting}: "))

    def __str__(self) -> str:
        return f"{self.setting}: {self.message}"


@dataclass(frozen=True, slots=True)
class Effective:
    """One setting as it stands: its value as text (secrets and credential options masked), and its
    source. ``invalid``: the value given does not validate, and is shown as given."""

    info: SettingInfo
    value: str
    source: Source
    invalid: bool = False


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The settings in effect and every problem with them, in the order: unknown names, invalid values,
    what ``run`` would refuse."""

    effective: list[Effective]
    problems: list[Problem]
    env_file: Path | None
    """The ``.env`` file read, when there is one."""
    settings: Settings | None
    """What ``run`` would get: None when any value is invalid."""


def diagnose(checks: Sequence[Check] = ()) -> Diagnosis:
    """Read the settings as ``load_settings`` does, and collect every problem instead of raising the
    first: unknown sections and fields, single-underscore names like a setting (``misnamed``), invalid
    values, and what :func:`run_problems` and ``checks`` find. A check's problem in a section that holds
    an invalid value is left out: it would judge a default put in the value's place."""
    environment, dotenv = environment_variables(), dotenv_variables()
    variables = dotenv | environment
    problems = [Problem.of(error) for error in unknown_sections(variables)]
    problems += [
        Problem(m.variable, f"not a setting (ignored); did you mean {m.closest}?")
        for m in misnamed(variables)
    ]
    built: dict[str, Any] = {}  # the sections, as model_construct takes them
    invalid: dict[str, set[str]] = {}
    try:
        raw = _raw_values()
    except ValueError as exc:  # a JSON value pydantic-settings cannot decode stops its sources
        problems.append(Problem.of(undecodable(exc, variables)))
        raw = None
    if raw is not None:
        for name, cls in sections().items():
            section, errors, bad = _lenient(name, cls, raw.get(name, {}))
            built[name] = section
            problems += [Problem.of(error) for error in errors]
            if bad:
                invalid[name] = bad
    settings = Settings() if raw is not None and not invalid else None
    if raw is not None:
        checked = settings or Settings.model_construct(**built)
        for check in (run_problems, *checks):
            problems += [Problem.of(e) for e in check(checked) if _section_of(e.setting) not in invalid]
    effective = [_effective(info, settings, built, invalid, environment, dotenv) for info in settings_info()]
    path = env_file()
    return Diagnosis(effective, problems, path if path and path.is_file() else None, settings)


def _raw_values() -> dict[str, Any]:
    """What pydantic-settings would validate: ``.env`` then the environment, deep-merged, by section."""
    merged: dict[str, Any] = {}
    for source in (DotEnvSettingsSource(Settings), EnvSettingsSource(Settings)):
        for key, value in source().items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = merged[key] | value
            else:
                merged[key] = value
    return merged


def _lenient(name: str, cls: type[Section], given: object) -> tuple[Section, list[ConfigError], set[str]]:
    """``cls`` validated from ``given``: the section, its errors (those of the first try, as ``run`` would
    see them), and the fields that failed. Failing fields are dropped and the rest tried again, so the
    section returned holds every good value and defaults for the bad ones."""
    values = dict(given) if isinstance(given, Mapping) else {}
    errors: list[ConfigError] = []
    bad: set[str] = set()
    for _ in range(len(values) + 1):  # each retry drops at least one value
        try:
            return cls.model_validate(values), errors, bad
        except ValidationError as exc:
            errors = errors or config_errors(exc, name)
            failed = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
            bad |= failed
            if not failed & set(values):
                break
            values = {k: v for k, v in values.items() if k not in failed}
    if not errors:  # not a Mapping at all: MICROBATCH_BATCH='[1]'
        errors = [ConfigError(ENV_PREFIX + name.upper(), "must be a JSON object of the section's settings")]
    return cls(), errors, bad | set(cls.model_fields)


def _section_of(setting: str) -> str:
    return setting.removeprefix(ENV_PREFIX).partition(ENV_DELIMITER)[0].lower()


def _effective(
    info: SettingInfo,
    settings: Settings | None,
    built: Mapping[str, Section],
    invalid: Mapping[str, Iterable[str]],
    environment: Mapping[str, str],
    dotenv: Mapping[str, str],
) -> Effective:
    name = info.variable
    source: Source = "environment" if name in environment else ".env" if name in dotenv else "default"
    given = environment.get(name, dotenv.get(name))
    if info.field in invalid.get(info.section, ()) and given is not None:
        return Effective(info, MASK if info.secret else _as_given(given), source, invalid=True)
    section = getattr(settings, info.section) if settings is not None else built.get(info.section)
    value = getattr(section, info.field) if section is not None else None
    file_field = SECRET_FILES.get(info.field) if info.section == "kafka" else None
    if source == "default" and value is not None and file_field and getattr(section, file_field):
        source = "file"
    return Effective(info, value_text(value) if section is not None else info.default, source)


def _as_given(text: str) -> str:
    """An invalid value as the user wrote it; a JSON object with its credential options masked."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    return value_text(decoded) if isinstance(decoded, dict) else text

"""Reading the settings: the environment and ``.env``, unknown names refused, errors as one line that names
the variable and never quotes its value. ``service.config._diagnose`` reads them the same way but goes on
past the first problem."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from dotenv import dotenv_values
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import NoDecode

from service.config._base import ENV_DELIMITER, ENV_PREFIX, env_name
from service.config._root import Settings, sections
from service.errors import ConfigError

_KAFKA_VALUE_TYPES = {"str", "int", "float", "bool"}  # the members of KafkaValue, as pydantic names them
# What Kubernetes gives every container for each Service in its namespace (a Service "microbatch" or
# "microbatch-metrics"): <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<port>], <NAME>_PORT=tcp://ip:port,
# <NAME>_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO]. Docker's legacy links look the same. Never a setting.
_PLATFORM_NAME = re.compile(r"(^|_)SERVICE_(HOST|PORT)(_|$)|(^|_)PORT_\d+_(TCP|UDP|SCTP)(_|$)")
_PLATFORM_VALUE = re.compile(r"^(tcp|udp|sctp)://", re.IGNORECASE)
# How alike a single-underscore name and a setting must be for the one to be taken for the other.
_MISNAMED_CUTOFF = 0.9


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (and ``.env`` in the working directory). Raises :class:`ConfigError` naming the
    first bad variable: an unknown section or field (with the closest known name), a bad value, or
    undecodable JSON. The message never contains the value."""
    variables = _variables()
    refuse_unknown_sections(variables)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise config_errors(exc)[0] from None
    except ValueError as exc:  # pydantic-settings reports an undecodable JSON value this way
        raise undecodable(exc, variables) from None


def _variables() -> dict[str, str]:
    """Every ``MICROBATCH_*`` variable the settings would see, upper-cased: ``.env`` first, the
    environment winning, as pydantic-settings reads them."""
    return dotenv_variables() | environment_variables()


def env_file() -> Path | None:
    """The ``.env`` file pydantic-settings reads (``Settings.model_config["env_file"]``), relative to the
    working directory; None when the settings name none."""
    name = Settings.model_config.get("env_file")
    return Path(name) if isinstance(name, str | Path) else None


def dotenv_variables() -> dict[str, str]:
    """The ``MICROBATCH_*`` variables of the ``.env`` file, upper-cased; none when there is no file."""
    path = env_file()
    if path is None or not path.is_file():
        return {}
    found = {k.upper(): v for k, v in dotenv_values(path).items() if v is not None}
    return {k: v for k, v in found.items() if k.startswith(ENV_PREFIX)}


def environment_variables() -> dict[str, str]:
    """The ``MICROBATCH_*`` variables of the environment, upper-cased."""
    return {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}


def setting_names() -> list[str]:
    """Every setting's variable, in the order of ``Settings``."""
    return [env_name((section, field)) for section, cls in sections().items() for field in cls.model_fields]


@dataclass(frozen=True, slots=True)
class Misnamed:
    """A variable that is no setting but looks like one (``MICROBATCH_INPUT_TOPICS``): ignored by
    pydantic-settings, so the user's value silently does nothing."""

    variable: str
    closest: str

    def __str__(self) -> str:
        return f"{self.variable} is not a setting (ignored); did you mean {self.closest}?"


def misnamed(variables: Mapping[str, str] | None = None) -> list[Misnamed]:
    """The single-underscore ``MICROBATCH_*`` names that closely match a setting: the same with ``__``
    written ``_`` (``MICROBATCH_BATCH_MAX_SIZE``), or nearly (difflib). Names with the ``__`` are
    :func:`refuse_unknown_sections`' and the sections' own business; what Kubernetes and Docker set for a
    Service (``MICROBATCH_SERVICE_HOST``, ``MICROBATCH_METRICS_PORT=tcp://...``) and names like no setting
    are left alone, since a deployment may carry them for reasons of its own. ``variables``: by default
    the environment's and ``.env``'s."""
    variables = _variables() if variables is None else variables
    flat = {name.replace(ENV_DELIMITER, "_"): name for name in setting_names()}
    found = []
    for name in sorted(variables):
        rest = name.removeprefix(ENV_PREFIX)
        if ENV_DELIMITER in rest or rest.lower() in sections():  # MICROBATCH_KAFKA='{...}' is a setting
            continue
        if _PLATFORM_NAME.search(rest) or _PLATFORM_VALUE.match(variables[name]):
            continue
        close = difflib.get_close_matches(name, list(flat), n=1, cutoff=_MISNAMED_CUTOFF)
        if close:
            found.append(Misnamed(name, flat[close[0]]))
    return found


def refuse_unknown_sections(variables: Iterable[str]) -> None:
    """Refuse a ``MICROBATCH_<SECTION>__<FIELD>`` variable whose section is not one of ``Settings``
    (``MICROBATCH_BACTH__MAX_SIZE``): it would otherwise be ignored silently. Raises ConfigError naming
    ``MICROBATCH_<SECTION>``. Names without the ``__`` are not settings and are left alone: Kubernetes and
    Docker give a container ``MICROBATCH_SERVICE_HOST`` or ``MICROBATCH_PORT`` for a service called
    ``microbatch``."""
    for problem in unknown_sections(variables):
        raise problem


def unknown_sections(variables: Iterable[str]) -> list[ConfigError]:
    """One error per unknown section among ``variables`` (see :func:`refuse_unknown_sections`)."""
    known = list(sections())
    found: dict[str, ConfigError] = {}
    for name in sorted(variables):
        section, delimiter, _field = name.removeprefix(ENV_PREFIX).partition(ENV_DELIMITER)
        section = section.lower()
        if delimiter and section not in known and section not in found:
            found[section] = ConfigError(
                env_name((section,)), "unknown settings section" + _did_you_mean(section, known)
            )
    return list(found.values())


def _did_you_mean(name: str, known: Iterable[str], prefix: tuple[str, ...] = ()) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {env_name((*prefix, close[0]))}?" if close else ""


def config_errors(exc: ValidationError, section: str | None = None) -> list[ConfigError]:
    """One ConfigError per error of ``exc`` (a section's own, when ``section`` names it), never quoting
    the value."""
    prefix: tuple[str, ...] = () if section is None else (section,)
    return [
        _config_error(err | {"loc": (*prefix, *err["loc"])})
        for err in exc.errors(include_url=False, include_input=False)
    ]


def undecodable(exc: ValueError, variables: Mapping[str, str]) -> ConfigError:
    """pydantic-settings' error for a value it could not decode as JSON, as a ConfigError naming the
    variable."""
    return ConfigError(_undecodable_setting(str(exc), variables), "not valid JSON")


def _config_error(err: ErrorDetails) -> ConfigError:
    loc = err["loc"]
    setting = env_name(loc)
    if err["type"] == "extra_forbidden" and len(loc) >= 2:
        section = sections().get(str(loc[0]))
        known = section.model_fields if section else {}
        return ConfigError(setting, "unknown setting" + _did_you_mean(str(loc[1]), known, (str(loc[0]),)))
    message = err["msg"].removeprefix("Value error, ")
    if len(loc) > 2:  # inside the value: an entry of a list or a JSON object
        if len(loc) > 3 and loc[3] in _KAFKA_VALUE_TYPES:
            message = "must be a string, a number or a boolean"
        message = f"entry {loc[2]!r}: {message}"
    return ConfigError(setting, message)


def _undecodable_setting(text: str, variables: Mapping[str, str]) -> str:
    """Find the variable behind pydantic-settings' 'error parsing value for field "kafka"'."""
    match = re.search(r'field "(\w+)"', text)
    known = sections()
    if not match or match.group(1) not in known:
        return ENV_PREFIX.rstrip("_")
    section = match.group(1)
    for field_name, info in known[section].model_fields.items():
        if NoDecode in info.metadata:  # lists take "a,b,c" and are never parsed as JSON here
            continue
        value = variables.get(env_name((section, field_name)))
        if value is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            origins = {get_origin(t) for t in (info.annotation, *get_args(info.annotation))}
            if origins & {dict, list}:
                return env_name((section, field_name))
    return env_name((section,))

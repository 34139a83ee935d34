"""Reading the settings: the environment and ``.env``, unknown names refused, errors as one line that names
the variable and never quotes its value."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
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


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (and ``.env`` in the working directory). Raises :class:`ConfigError` naming the
    first bad variable: an unknown section or field (with the closest known name), a bad value, or
    undecodable JSON. The message never contains the value."""
    variables = _variables()
    refuse_unknown_sections(variables)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise _config_error(exc.errors(include_url=False, include_input=False)[0]) from None
    except ValueError as exc:  # pydantic-settings reports an undecodable JSON value this way
        raise ConfigError(_undecodable_setting(str(exc), variables), "not valid JSON") from None


def _variables() -> dict[str, str]:
    """Every ``MICROBATCH_*`` variable the settings would see, upper-cased: ``.env`` first, the
    environment winning, as pydantic-settings reads them."""
    dotenv = Settings.model_config.get("env_file")
    found: dict[str, str] = {}
    if isinstance(dotenv, str) and Path(dotenv).is_file():
        found |= {k.upper(): v for k, v in dotenv_values(dotenv).items() if v is not None}
    found |= {k.upper(): v for k, v in os.environ.items()}
    return {k: v for k, v in found.items() if k.startswith(ENV_PREFIX)}


def refuse_unknown_sections(variables: Iterable[str]) -> None:
    """Refuse a ``MICROBATCH_<SECTION>__<FIELD>`` variable whose section is not one of ``Settings``
    (``MICROBATCH_BACTH__MAX_SIZE``): it would otherwise be ignored silently. Raises ConfigError naming
    ``MICROBATCH_<SECTION>``. Names without the ``__`` are not settings and are left alone: Kubernetes and
    Docker give a container ``MICROBATCH_SERVICE_HOST`` or ``MICROBATCH_PORT`` for a service called
    ``microbatch``."""
    known = list(sections())
    for name in sorted(variables):
        section, delimiter, _field = name.removeprefix(ENV_PREFIX).partition(ENV_DELIMITER)
        section = section.lower()
        if delimiter and section not in known:
            raise ConfigError(
                env_name((section,)), "unknown settings section" + _did_you_mean(section, known)
            )


def _did_you_mean(name: str, known: Iterable[str], prefix: tuple[str, ...] = ()) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {env_name((*prefix, close[0]))}?" if close else ""


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

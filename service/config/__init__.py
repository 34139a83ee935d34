"""Settings: one class per concern, nested under one root :class:`Settings`.

Every value comes from environment variables named ``MICROBATCH_<SECTION>__<FIELD>`` (e.g.
``MICROBATCH_BATCH__MAX_SIZE``) or from an optional ``.env`` file. Build the settings once in ``main()``
with :func:`load_settings` and pass them down; nothing here is module-global. A section names its own
variables (``BatchSettings.env("max_size")``), so no variable name is typed by hand.

Each field's docstring documents it: :func:`settings_info` reads them, :data:`COMMON` names the few a new
user sets first, ``service.config.reference`` renders docs/CONFIG.md and ``.env.example`` (``make docs``),
and :func:`diagnose` is what ``microbatch config`` prints: every problem at once, where ``load_settings``
stops at the first.
"""

from service.config._base import ENV_DELIMITER, ENV_PREFIX, Section, env_name
from service.config._describe import (
    COMMON,
    SettingInfo,
    common_help,
    common_settings,
    plain,
    settings_info,
    value_text,
)
from service.config._diagnose import Diagnosis, Effective, Problem, diagnose
from service.config._kafka import (
    GUARANTEE_KEYS,
    KafkaSettings,
    KafkaValue,
    private_option,
    private_values_of,
    redact,
    redactor,
)
from service.config._load import Misnamed, load_settings, misnamed
from service.config._root import Settings, sections
from service.config._run import check_run_settings, require_topics, run_problems
from service.config._sections import (
    AssembleSettings,
    BatchSettings,
    DeliverySettings,
    DlqSettings,
    GpuSettings,
    InputSettings,
    LogSettings,
    MetricsSettings,
    ModelSettings,
    OutputSettings,
)

__all__ = [
    "COMMON",
    "ENV_DELIMITER",
    "ENV_PREFIX",
    "GUARANTEE_KEYS",
    "AssembleSettings",
    "BatchSettings",
    "DeliverySettings",
    "Diagnosis",
    "DlqSettings",
    "Effective",
    "GpuSettings",
    "InputSettings",
    "KafkaSettings",
    "KafkaValue",
    "LogSettings",
    "MetricsSettings",
    "Misnamed",
    "ModelSettings",
    "OutputSettings",
    "Problem",
    "Section",
    "SettingInfo",
    "Settings",
    "check_run_settings",
    "common_help",
    "common_settings",
    "diagnose",
    "env_name",
    "load_settings",
    "misnamed",
    "plain",
    "private_option",
    "private_values_of",
    "redact",
    "redactor",
    "require_topics",
    "run_problems",
    "sections",
    "settings_info",
    "value_text",
]

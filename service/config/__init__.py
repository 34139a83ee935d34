"""Settings: one class per concern, nested under one root :class:`Settings`.

Every value comes from environment variables named ``MICROBATCH_<SECTION>__<FIELD>`` (e.g.
``MICROBATCH_BATCH__MAX_SIZE``) or from an optional ``.env`` file. Build the settings once in ``main()``
with :func:`load_settings` and pass them down; nothing here is module-global. A section names its own
variables (``BatchSettings.env("max_size")``), so no variable name is typed by hand.
"""

from service.config._base import ENV_DELIMITER, ENV_PREFIX, Section, env_name
from service.config._kafka import (
    GUARANTEE_KEYS,
    KafkaSettings,
    KafkaValue,
    private_option,
    private_values_of,
    redact,
    redactor,
)
from service.config._load import load_settings
from service.config._root import Settings, sections
from service.config._run import check_run_settings, require_topics
from service.config._sections import (
    AssembleSettings,
    BatchSettings,
    DlqSettings,
    GpuSettings,
    InputSettings,
    LogSettings,
    MetricsSettings,
    ModelSettings,
    OutputSettings,
)

__all__ = [
    "ENV_DELIMITER",
    "ENV_PREFIX",
    "GUARANTEE_KEYS",
    "AssembleSettings",
    "BatchSettings",
    "DlqSettings",
    "GpuSettings",
    "InputSettings",
    "KafkaSettings",
    "KafkaValue",
    "LogSettings",
    "MetricsSettings",
    "ModelSettings",
    "OutputSettings",
    "Section",
    "Settings",
    "check_run_settings",
    "env_name",
    "load_settings",
    "private_option",
    "private_values_of",
    "redact",
    "redactor",
    "require_topics",
    "sections",
]

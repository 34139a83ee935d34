"""The root of all settings: one field per section. Each section learns its name here, so that every
variable name (``Section.env``) is derived from this class."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.config._base import ENV_DELIMITER, ENV_PREFIX, Section
from service.config._kafka import KafkaSettings
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


class Settings(BaseSettings):
    """The root of all settings."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        env_file=".env",
        env_file_encoding="utf-8",
        # Unknown sections are refused by load_settings, which sees every variable (pydantic-settings only
        # looks up the names it knows); unknown fields of a known section by the section itself.
        extra="ignore",
        frozen=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    input: InputSettings = Field(default_factory=InputSettings)
    output: OutputSettings = Field(default_factory=OutputSettings)
    dlq: DlqSettings = Field(default_factory=DlqSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    assemble: AssembleSettings = Field(default_factory=AssembleSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)


def sections() -> dict[str, type[Section]]:
    """``{"kafka": KafkaSettings, ...}``, in declaration order."""
    found: dict[str, type[Section]] = {}
    for name, info in Settings.model_fields.items():
        cls = info.annotation
        if not (isinstance(cls, type) and issubclass(cls, Section)):
            raise TypeError(f"Settings.{name} is not a settings section")
        found[name] = cls
    return found


for _name, _cls in sections().items():
    _cls.section = _name

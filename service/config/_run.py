"""What ``microbatch run`` needs beyond each setting's own checks."""

from __future__ import annotations

from service.config._root import Settings
from service.errors import ConfigError


def check_run_settings(settings: Settings) -> None:
    """Topics (:func:`require_topics`), and a liveness timeout longer than a commit may legitimately
    block. Raises ConfigError naming the variable."""
    require_topics(settings)
    metrics, output = settings.metrics, settings.output
    if metrics.enabled and metrics.liveness_timeout_s <= output.flush_timeout_s:
        raise ConfigError(
            metrics.env("liveness_timeout_s"),
            f"must be > {output.env('flush_timeout_s')}: a commit waits up to that long for the producer, "
            "and /healthz would fail meanwhile",
        )


def require_topics(settings: Settings) -> None:
    """``run`` needs at least one input topic, and inputs must differ from the outputs."""
    inputs = settings.input
    if not inputs.topics:
        raise ConfigError(inputs.env("topics"), "at least one input topic is required")
    for section in (settings.output, settings.dlq):
        if section.topic in inputs.topics:
            raise ConfigError(section.env("topic"), f"is also one of {inputs.env('topics')}")

"""What ``microbatch run`` needs beyond each setting's own checks."""

from __future__ import annotations

from service.config._root import Settings
from service.errors import ConfigError


def check_run_settings(settings: Settings) -> None:
    """Raises the first of :func:`run_problems`: a ConfigError naming the variable."""
    for problem in run_problems(settings):
        raise problem


def run_problems(settings: Settings) -> list[ConfigError]:
    """Every problem ``run`` would refuse to start with, not counting the model choice
    (``service.models.reference.choose_model``): the topics (:func:`topic_problems`), and a liveness
    timeout longer than a commit may legitimately block."""
    problems = topic_problems(settings)
    metrics, output = settings.metrics, settings.output
    if metrics.enabled and metrics.liveness_timeout_s <= output.flush_timeout_s:
        problems.append(
            ConfigError(
                metrics.env("liveness_timeout_s"),
                f"must be > {output.env('flush_timeout_s')}: a commit waits up to that long for the "
                "producer, and /healthz would fail meanwhile",
            )
        )
    return problems


def require_topics(settings: Settings) -> None:
    """``run`` needs at least one input topic, and inputs must differ from the outputs. Raises the first
    of :func:`topic_problems`."""
    for problem in topic_problems(settings):
        raise problem


def topic_problems(settings: Settings) -> list[ConfigError]:
    inputs = settings.input
    problems = []
    if not inputs.topics:
        problems.append(ConfigError(inputs.env("topics"), "at least one input topic is required"))
    for section in (settings.output, settings.dlq):
        if section.topic in inputs.topics:
            problems.append(ConfigError(section.env("topic"), f"is also one of {inputs.env('topics')}"))
    return problems

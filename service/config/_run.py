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
    problems += share_problems(settings)
    return problems


def share_problems(settings: Settings) -> list[ConfigError]:
    """What a share group cannot do: transactions (a share group commits no offsets to put in one),
    static membership, and rows assembled from one host's messages in order (checked again once the
    model says whether it assembles them)."""
    kafka = settings.kafka
    if kafka.group_type != "share":
        return []
    why = f"{kafka.env('group_type')}=share"
    problems = []
    if settings.delivery.guarantee == "exactly-once":
        problems.append(
            ConfigError(settings.delivery.env("guarantee"), f"exactly-once needs a consumer group, not {why}")
        )
    if kafka.group_instance_id is not None:
        problems.append(
            ConfigError(kafka.env("group_instance_id"), f"a share group has no static members ({why})")
        )
    if settings.assemble.enabled:
        problems.append(
            ConfigError(settings.assemble.env("enabled"), f"rows need messages in order, not {why}")
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

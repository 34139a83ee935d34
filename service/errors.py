"""Every error the service raises on purpose, in one place, and the closed set of dead-letter reasons.

The tree, with each class's exit code (the CLI exits with ``type(error).exit_code``; no table of its own)::

    MicrobatchError                 1  base class: a runtime failure
    ├── ConfigError                 2  a setting is invalid; names the MICROBATCH_* variable
    ├── UsageError                  2  a command-line flag is invalid; names the flag
    ├── EnvironmentNotReadyError    3  what the service needs outside itself is missing at start-up
    │   ├── BrokerUnavailableError  3  no broker answered in time
    │   ├── UnknownTopicError       3  a topic the command needs does not exist
    │   └── NotAuthorizedError      3  the cluster's ACLs refuse the principal what the command needs
    ├── CouldNotCheckError          4  verify could not read what it checks (a permission it lacks)
    ├── FatalKafkaError             1  librdkafka reported a fatal error; keeps its error code
    │   ├── FencedError             5  another live instance took this one's transactional id
    │   └── TransactionStateError   6  the coordinator holds the transaction where only a restart goes on
    ├── StalledError                6  a client call blocked past its own timeout: the process exits
    ├── EngineFailedError           1  the model fails on a known-good sample: the runtime is broken
    ├── BatchMismatchError          1  a processor or model broke one-result-per-input
    ├── OffsetOrderError            1  an offset went backwards without a rebalance
    ├── TransactionAborted          -  the open transaction was aborted: the loop reads again, never an exit
    └── InvalidMessage              -  one message cannot be processed: a dead letter, never an exit

Errors about one message carry that message's coordinates and raw bytes (see
:class:`service.flow.records.Rejection`), so a dead-letter record can be written from the error alone.
No message here ever quotes a setting's value: configuration errors name the variable and the reason.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

EXIT_OK = 0


class Reason(StrEnum):
    """The closed set of dead-letter reason codes (the ``error.reason`` header)."""

    EMPTY_VALUE = "empty_value"
    """The value is null (a tombstone) or zero bytes long."""
    VALUE_TOO_LARGE = "value_too_large"
    """The value is longer than ``MICROBATCH_INPUT__MAX_VALUE_BYTES``."""
    INVALID_UTF8 = "invalid_utf8"
    """The value is not valid UTF-8 text."""
    INVALID_JSON = "invalid_json"
    """The value is not JSON where the input format expects JSON (``json``, ``otlp-json``)."""
    INVALID_PROTOBUF = "invalid_protobuf"
    """The value is not a protobuf message of the input format's type (``otlp-proto``)."""
    INVALID_EVENT = "invalid_event"
    """A well-formed message or record of the wrong shape: not an object, a field missing, mistyped or not
    finite, an empty text."""
    INFERENCE_ERROR = "inference_error"
    """The model failed on this item even when run alone."""
    INVALID_OUTPUT = "invalid_output"
    """The model returned a non-finite value (NaN or infinity), or a result that cannot be encoded."""
    INVALID_HEADERS = "invalid_headers"
    """The record's headers cannot be read (a header name that is not UTF-8); they are not copied."""
    OUTPUT_REJECTED = "output_rejected"
    """The broker refused this item's result for good (e.g. larger than the output topic allows)."""
    DELIVERY_LIMIT = "delivery_limit"
    """A share group handed the record out the most times its group allows (``share.delivery.count.limit``)
    and no member answered it before: a record that stops the process each time it is processed. It is
    dead-lettered unprocessed on that last delivery, rather than archived by the broker without a trace."""


class MicrobatchError(Exception):
    """Base class of the service's own errors: a runtime failure unless a subclass says otherwise."""

    exit_code: ClassVar[int] = 1


class ConfigError(MicrobatchError):
    """A setting is invalid; the service must not start. ``setting`` is the environment variable name."""

    exit_code = 2

    def __init__(self, setting: str, message: str) -> None:
        # One line, always: messages quoted from ONNX Runtime span several.
        super().__init__(f"invalid setting {setting}: {' '.join(message.split())}")
        self.setting = setting


class UsageError(MicrobatchError):
    """A command-line flag is invalid (or a command needs an optional extra that is not installed)."""

    exit_code = 2

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {' '.join(message.split())}")
        self.flag = flag


class EnvironmentNotReadyError(MicrobatchError):
    """What the service needs outside itself is missing at start-up: brokers unreachable, input topic
    absent. Exit code 3, so an orchestrator can tell it from a configuration error (2)."""

    exit_code = 3


class UnknownTopicError(EnvironmentNotReadyError):
    """A topic the command needs does not exist (or this client may not see it)."""


class NotAuthorizedError(EnvironmentNotReadyError):
    """The cluster's ACLs refuse this principal something the command needs (DESCRIBE on a topic, READ on
    its group): the message names the resource and the permission."""


class BrokerUnavailableError(EnvironmentNotReadyError):
    """No broker answered within ``MICROBATCH_KAFKA__STARTUP_TIMEOUT_S``."""


class CouldNotCheckError(MicrobatchError):
    """``verify`` could not read what it must check (an ACL it lacks, a broker gone): not a verdict
    either way, so neither 0 (nothing lost) nor 1 (something lost)."""

    exit_code = 4


class FatalKafkaError(MicrobatchError):
    """librdkafka reported a fatal error (e.g. the idempotent producer was fenced); the service must stop.
    ``code`` is librdkafka's error code and ``name`` its symbolic name (e.g. ``_FENCED``)."""

    def __init__(self, client: str, code: int, name: str, message: str) -> None:
        super().__init__(f"{client}: {message} ({name})")
        self.client = client
        self.code = code
        self.name = name
        self.message = message


class FencedError(FatalKafkaError):
    """Exactly-once: the transaction coordinator fenced this instance's producer, because another live
    process registered the same transactional id since. That one owns the work now; this one must stop
    (exit 5), and say which setting gives each replica an id of its own."""

    exit_code = 5


class TransactionStateError(FatalKafkaError):
    """Exactly-once: the transaction coordinator answered with a state this producer cannot go on from
    (``INVALID_TXN_STATE``, fatal in librdkafka: seen when an abort met a coordinator that had just moved).
    The producer is unusable; a restart under the same transactional id registers it afresh, which ends
    whatever was open. Exit 6, as :class:`StalledError`: both ask the orchestrator for that restart."""

    exit_code = 6


class StalledError(MicrobatchError):
    """A Kafka client call blocked well past its own timeout (a client fault: a coordinator's node died
    and librdkafka waits for it for good). Never raised: the thread is stuck in C, so
    :class:`service.kafka.stall.Stall` exits the process with this code from a timer (exit 6), for the
    orchestrator to restart it; under exactly-once the restart aborts what was open."""

    exit_code = 6

    def __init__(self, call: str, waited_s: float) -> None:
        super().__init__(
            f"stalled: the Kafka client's {call} has not returned after {waited_s:g}s (its timeout "
            f"passed); exiting so that a restart resumes from the last commit"
        )


class TransactionAborted(MicrobatchError):
    """Exactly-once: the open transaction was aborted (a delivery failed, the group moved on, a commit
    could not complete). Nothing of it is visible to ``read_committed`` readers; the loop drops what it
    holds and reads again from the last committed offsets. Never an exit. ``fenced``: the group had moved
    on (this instance was a zombie, fenced by its group's generation); ``partitions``: those rewound (every
    one owned), as ``(topic, partition)``."""

    def __init__(
        self, why: str, partitions: frozenset[tuple[str, int]] = frozenset(), *, fenced: bool = False
    ) -> None:
        super().__init__(why)
        self.partitions = partitions
        self.fenced = fenced


class EngineFailedError(MicrobatchError):
    """The model fails even on a known-good sample: the runtime itself is broken (e.g. a lost GPU), so
    stopping beats dead-lettering every message."""


class BatchMismatchError(MicrobatchError):
    """A processor or model returned a different number of results than the batch had inputs."""


class OffsetOrderError(MicrobatchError):
    """An offset was tracked below one already tracked for its partition without a rebalance between."""


class InvalidMessage(MicrobatchError):
    """A processor cannot turn a message into an item; the message goes to the dead-letter topic."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# Lower-cased fragments of the errors ONNX Runtime raises when an allocation fails: the BFC arena's
# "Failed to allocate memory", CUDA's "out of memory" / cudaErrorMemoryAllocation, cuBLAS's and cuDNN's
# *_STATUS_ALLOC_FAILED, C++ std::bad_alloc.
_OOM_MARKERS = ("failed to allocate", "out of memory", "bad_alloc", "memoryallocation", "alloc_failed")


def is_out_of_memory(message: str) -> bool:
    """Whether an error message from ONNX Runtime says an allocation failed (host or device): the sweep
    stops there, the service splits the batch and holds the batch size down."""
    text = message.lower()
    return any(marker in text for marker in _OOM_MARKERS)

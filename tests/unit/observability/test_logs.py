"""service/observability/logs.py: librdkafka's log lines are structured, throttled per client and facility,
and redacted."""

from __future__ import annotations

from confluent_kafka import KafkaError
from structlog.testing import capture_logs

from service.kafka.retries import SETTLE_S, Settling
from service.observability.logs import RateLimitedClientLog, client_log

FMT = "%s [%s] %s"


def test_repeated_lines_are_throttled_per_client_and_facility_with_a_count(clock):
    log = RateLimitedClientLog(every_s=5.0, clock=clock)
    with capture_logs() as captured:
        for _ in range(10):  # a failed connect every 50 ms for half a second
            log.log(40, FMT, "FAIL", "rdkafka#producer-1", "Connect failed: Connection refused")
            clock.advance(0.05)
        log.log(40, FMT, "FAIL", "rdkafka#consumer-2", "Connect failed")  # another client: its own budget
        log.log(40, FMT, "REQTMOUT", "rdkafka#producer-1", "timed out")  # another facility too
        clock.advance(5.0)
        log.log(40, FMT, "FAIL", "rdkafka#producer-1", "Connect failed: Connection refused")
    events = [(e["event"], e["similar_since_last"]) for e in captured]
    assert events == [
        ("FAIL [rdkafka#producer-1] Connect failed: Connection refused", 0),
        ("FAIL [rdkafka#consumer-2] Connect failed", 0),
        ("REQTMOUT [rdkafka#producer-1] timed out", 0),
        ("FAIL [rdkafka#producer-1] Connect failed: Connection refused", 9),
    ]
    assert all(e["log_level"] == "error" for e in captured)


def test_configured_values_are_redacted_from_librdkafkas_lines(clock):
    secret = "s3cr3t-Pa55phrase"
    log = RateLimitedClientLog(clock=clock, private=[secret])
    with capture_logs() as captured:
        log.log(30, FMT, "CONFWARN", "rdkafka#consumer-1", f"`sasl.mechanism` set to `{secret}`")
        log.log(30, FMT, "SSL", "rdkafka#producer-2", f"calling fopen({secret}, r)")
    assert [e["event"] for e in captured] == [
        "CONFWARN [rdkafka#consumer-1] `sasl.mechanism` set to `***`",
        "SSL [rdkafka#producer-2] calling fopen(***, r)",
    ]


def test_a_tools_client_log_redacts_the_credentials_of_its_configuration(clock):
    secret = "s3cr3t-Pa55phrase"
    log = client_log(
        {"bootstrap.servers": "broker:9092", "sasl.password": secret, "ssl.key.password": "k3y-pass"}
    )
    with capture_logs() as captured:
        log.log(30, FMT, "FAIL", "rdkafka#producer-1", f"broker:9092 refused {secret} and k3y-pass")
    assert captured[0]["event"] == "FAIL [rdkafka#producer-1] broker:9092 refused *** and ***"


# -- retries that settle by themselves: held at debug, unless they keep coming back -------------------------

GETPID = (
    "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
    f"{KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS).str()}: retrying"
)
REFUSED = "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused"


def levels(captured: list[dict]) -> list[tuple[str, str]]:
    return [(e["event"].split(" ", 1)[0], e["log_level"]) for e in captured]


def test_a_coordinator_still_loading_is_debug_while_it_settles_and_a_warning_once_it_persists(clock):
    log = RateLimitedClientLog(every_s=0.0, clock=clock, hold=Settling(clock=clock).hold)
    with capture_logs() as captured:
        clock.advance(60.0)  # long after the client started: the error itself says it settles
        for _ in range(int(SETTLE_S) + 2):  # librdkafka retries it every second or so
            log.log(30, FMT, "GETPID", "rdkafka#producer-1", GETPID)
            clock.advance(1.0)
    held = int(SETTLE_S)  # the lines of the first SETTLE_S seconds
    assert levels(captured) == [("GETPID", "debug")] * held + [("GETPID", "warning")] * 2


def test_a_refused_connection_is_debug_only_while_the_client_starts(clock):
    log = RateLimitedClientLog(every_s=0.0, clock=clock, hold=Settling(clock=clock).hold)
    with capture_logs() as captured:
        log.log(40, FMT, "FAIL", "rdkafka#consumer-1", REFUSED)  # a broker still opening its listener
        clock.advance(SETTLE_S)  # the client is running now: brokers down is an outage, logged as ever
        log.log(40, FMT, "FAIL", "rdkafka#consumer-1", REFUSED)
        log.log(40, FMT, "ERROR", "rdkafka#consumer-1", "1/1 brokers are down")
    assert levels(captured) == [("FAIL", "debug"), ("FAIL", "error"), ("ERROR", "error")]


def test_brokers_down_from_the_start_surface_once_the_start_up_grace_is_over(clock):
    log = RateLimitedClientLog(every_s=5.0, clock=clock, hold=Settling(clock=clock).hold)
    with capture_logs() as captured:
        for _ in range(40):  # librdkafka's reconnect back-off, for 20 s
            log.log(40, FMT, "FAIL", "rdkafka#consumer-1", REFUSED)
            clock.advance(0.5)
    assert levels(captured)[0] == ("FAIL", "debug")
    assert ("FAIL", "error") in levels(captured)
    assert captured[-1]["log_level"] == "error" and captured[-1]["similar_since_last"] > 0


def test_other_lines_keep_their_level(clock):
    log = RateLimitedClientLog(clock=clock, hold=Settling(clock=clock).hold)
    with capture_logs() as captured:
        log.log(30, FMT, "CONFWARN", "rdkafka#consumer-1", "Configuration property x is deprecated")
        log.log(
            40,
            FMT,
            "GETPID",
            "rdkafka#producer-1",
            "Failed to acquire idempotence PID: Broker: Cluster authorization failed",
        )
    assert levels(captured) == [("CONFWARN", "warning"), ("GETPID", "error")]


def test_a_tools_client_log_holds_the_retries_that_settle(clock):
    with capture_logs() as captured:
        client_log({"bootstrap.servers": "broker:9092"}).log(30, FMT, "GETPID", "rdkafka#producer-1", GETPID)
    assert levels(captured) == [("GETPID", "debug")]

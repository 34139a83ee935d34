"""service/observability/logs.py: librdkafka's log lines are structured, throttled per client and facility,
and redacted."""

from __future__ import annotations

from structlog.testing import capture_logs

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

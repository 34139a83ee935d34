"""librdkafka's log lines are structured and throttled per client and facility."""

from __future__ import annotations

from structlog.testing import capture_logs

from service.logs import RateLimitedClientLog

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

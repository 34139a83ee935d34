"""A backfill killed mid-range (SIGKILL: no flush, no commit) and run again with the same job name, twice:
every input of the range is answered in the end, each rerun starts from the job's committed offsets rather
than from the beginning, and the duplicates are only the uncommitted tail of each killed run."""

from __future__ import annotations

import signal

import pytest

from service.tools.verify import format_report, verify
from tests.support.harness import (
    SERVICE_PARTITIONS,
    committed,
    metrics_events,
    produce,
    start_backfill,
    summary_of,
    wait_for,
)

pytestmark = pytest.mark.chaos

EVENTS = 200_000
# Small batches slow the job to 10-20 s, so that each kill lands mid-range after some commits.
SETTINGS = {"batch__max_size": 32, "kafka__group_id": "chaos"}


def test_a_backfill_killed_twice_resumes_and_loses_nothing(tmp_path, kafka_bootstrap, topic_factory):
    topics = {
        "in": topic_factory(partitions=SERVICE_PARTITIONS, prefix="in"),
        "out": topic_factory(partitions=SERVICE_PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    produce(kafka_bootstrap, topics["in"], metrics_events(EVENTS, seed=11))
    group = f"chaos-backfill-{topics['in']}"

    def progress() -> int:
        return sum(committed(kafka_bootstrap, group, topics["in"], SERVICE_PARTITIONS).values())

    runs = []
    for share in (0.2, 0.5):
        job = start_backfill(tmp_path, kafka_bootstrap, topics, topics["in"], **SETTINGS)
        runs.append(job)
        wait_for(
            lambda s=share, j=job: progress() >= s * EVENTS or not j.alive(), 120, f"{share:.0%} committed"
        )
        assert job.alive(), f"the range ended before the kill: {job.log()[-2000:]}"
        assert job.stop(signal.SIGKILL) == -signal.SIGKILL
    before_last = progress()
    last = start_backfill(tmp_path, kafka_bootstrap, topics, topics["in"], **SETTINGS)
    assert last.proc.wait(timeout=300) == 0, last.log()[-3000:]

    conf = {"bootstrap.servers": kafka_bootstrap}
    report = verify(conf, topics["in"], topics["out"], topics["dlq"], 120)
    assert report.ok, format_report(report)
    # Each rerun resumed from the job's commits: the last read only what was left after them.
    for rerun in (runs[1], last):
        assert rerun.events("backfill_range")[0]["resumed"], rerun.log()[-2000:]
    assert summary_of(last)["events"] == EVENTS - before_last
    assert progress() == EVENTS
    # Duplicates come only from the killed runs' uncommitted tails: far fewer than the range.
    assert report.total("duplicates") < EVENTS // 4, format_report(report)

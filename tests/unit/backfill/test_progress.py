"""service/backfill/progress.py and the command's pure helpers: progress lines and gauges on a fake clock,
the job's settings, offline batches."""

from __future__ import annotations

import io

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from service.backfill.command import OFFLINE_WAIT_MS, backfill_settings, offline_batch
from service.backfill.progress import Progress
from service.backfill.ranges import Ranges
from service.config import Settings
from service.errors import UsageError
from service.flow.records import InputRecord
from tests.support.fakes import FakeClock

A0 = ("a", 0)


def test_progress_is_one_line_every_interval_and_two_gauges():
    clock = FakeClock(0.0)
    registry = CollectorRegistry()
    ranges = Ranges({A0: 0}, {A0: 1000})
    progress = Progress(ranges.total, registry, interval_s=5.0, stream=io.StringIO(), clock=clock)
    with capture_logs() as logs:
        clock.advance(4.9)
        progress(ranges)  # not due yet
        ranges.admit([InputRecord("a", 0, 249, None, b"{}", None, None, 0.0)])  # 250 read in 5 s
        clock.advance(0.1)
        progress(ranges)
        progress(ranges)  # due again only 5 s later
        clock.advance(5.0)
        ranges.reached({A0: 1000})
        progress.close(ranges)
    lines = [entry for entry in logs if entry["event"] == "backfill_progress"]
    assert [(e["read"], e["total"], e["percent"]) for e in lines] == [(250, 1000, 25.0), (1000, 1000, 100.0)]
    assert lines[0]["events_per_s"] == 50 and lines[0]["eta_s"] == 15.0
    assert registry.get_sample_value("microbatch_backfill_range_offsets") == 1000
    assert registry.get_sample_value("microbatch_backfill_read_offsets") == 1000


def test_the_job_gets_its_own_group_and_the_output_flag_replaces_the_topic():
    settings = Settings(
        input={"topics": ["in"]},
        kafka={"group_id": "scorer", "auto_offset_reset": "latest"},
        output={"topic": "out"},
    )
    job = backfill_settings(settings, "rescore-2026.11_v2", "out-rescored")
    assert job.kafka.group_id == "scorer-backfill-rescore-2026.11_v2"
    assert job.kafka.auto_offset_reset == "earliest"  # retention overtaking a read never skips to the end
    assert job.output.topic == "out-rescored"
    assert backfill_settings(settings, "j", None).output.topic == "out"


@pytest.mark.parametrize(
    ("job", "output", "flag"), [("a b", None, "--job"), ("", None, "--job"), ("j", "in", "--output")]
)
def test_a_bad_job_name_or_an_output_that_is_an_input_is_refused(job, output, flag):
    settings = Settings(input={"topics": ["in"]})
    with pytest.raises(UsageError, match=f"^{flag}: "):
        backfill_settings(settings, job, output)


def test_offline_batches_are_cut_full_with_no_window_or_natural_cut_to_make_them_smaller():
    batch = offline_batch(Settings().batch, 256)
    assert (batch.adaptive, batch.natural, batch.max_size) == (False, False, 256)
    assert batch.max_wait_ms == OFFLINE_WAIT_MS


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_a_bar_of_events_read_with_rate_and_eta():
    clock = FakeClock(0.0)
    terminal = Terminal()
    ranges = Ranges({A0: 0}, {A0: 2000})
    progress = Progress(ranges.total, CollectorRegistry(), stream=terminal, clock=clock)
    with capture_logs() as logs:
        clock.advance(1.0)
        ranges.admit([InputRecord("a", 0, 499, None, b"{}", None, None, 0.0)])
        progress(ranges)
        ranges.reached({A0: 2000})
        progress.close(ranges)
    drawn = terminal.getvalue()
    assert "backfill:" in drawn and "500/2.00k" in drawn and "2.00k/2.00k" in drawn and "100%" in drawn
    assert not [entry for entry in logs if entry["event"] == "backfill_progress"]  # the bar instead

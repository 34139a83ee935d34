"""``microbatch backfill``: score a bounded range of the input topics at full speed, then exit.

The offline regime. It takes the same MICROBATCH_* settings as ``run``, plus the range on the command
line, and runs the service's own loop (decode, batch, infer, produce, commit only what was delivered),
with three differences:

- **Reading**: the range's partitions are assigned, not subscribed, so no consumer group rebalances and a
  live service's offsets are never touched. Progress is committed under a group of the job's own,
  ``<MICROBATCH_KAFKA__GROUP_ID>-backfill-<job>``: run it again with the same ``--job`` and it resumes
  where the last run's deliveries got to (duplicates only from the uncommitted tail).
- **Batches** are cut full, for throughput: no window, no adaptive size. The size is
  ``MICROBATCH_BATCH__MAX_SIZE`` when set, else the model's throughput knee measured at warm-up, capped
  so that peak memory stays under 70% of the limit (``service.engine.drain.offline_size``). Text is
  chosen among a wider bucket window (order within a range does not matter).
- **The end**: once every partition was read to its ``--to``, the loop finishes, flushes, commits and
  exits 0 with a summary; 1 when stopped early or when outputs stayed unacknowledged.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import msgspec
import structlog

from service.backfill.bounds import ACCEPTED, parse, parse_partitions
from service.backfill.plan import Plan, job_group, plan
from service.backfill.progress import Progress
from service.backfill.source import RangeSource
from service.config import BatchSettings, OutputSettings, Settings
from service.engine.drain import offline_size
from service.errors import EXIT_OK, UsageError
from service.flow.model import Model
from service.flow.ports import EngineLike
from service.kafka import RangeReader
from service.startup import Mode, started

_log = structlog.get_logger("microbatch.backfill")

OFFLINE_WAIT_MS = 1000.0
"""The offline window: no batch waits longer for its last items (the streaming default is 50 ms)."""

_JOB = re.compile(r"[A-Za-z0-9._-]{1,200}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job",
        required=True,
        help="names this backfill: its progress is committed under <group id>-backfill-<job>, and a run "
        "with the same name resumes it",
    )
    parser.add_argument("--from", dest="start", default="earliest", help=f"where to start: {ACCEPTED}")
    parser.add_argument(
        "--to", dest="end", default="latest", help="where to stop, exclusive (same forms as --from)"
    )
    parser.add_argument(
        "--output", default=None, help=f"the results topic (default {OutputSettings.env('topic')})"
    )
    parser.add_argument(
        "--partitions",
        default=None,
        help="the partitions this process reads: 0,2,4-7, or I/N for those with p %% N == I (default all)",
    )
    parser.add_argument(
        "--progress-interval",
        type=_positive,
        default=5.0,
        help="seconds between progress lines (not a terminal)",
    )


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def offline(model: Model[EngineLike], batch: BatchSettings) -> tuple[BatchSettings, int | None]:
    """The backfill's batches: cut full at the offline size measured on ``model``; no drain regime."""
    size = offline_size(model, batch)
    _log.info("backfill_batch_size", **size.describe())
    return offline_batch(batch, size.size), None


OFFLINE = Mode(RangeReader, warm=lambda _batch: {1}, batches=offline)
"""The backfill's mode: the range's partitions assigned, batches cut full."""


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = backfill_settings(settings, args.job, args.output)
    now_ms = time.time_ns() // 1_000_000
    first = parse("--from", args.start, lambda: now_ms)
    last = parse("--to", args.end, lambda: now_ms)
    chosen = parse_partitions("--partitions", args.partitions)
    with started(settings, OFFLINE) as starting:
        if starting is None:
            _log.warning("backfill_incomplete", hint="stopped while starting; run again with the same --job")
            return 1
        source = starting.source
        planned = plan(source.offsets(), settings.input.topics, chosen, first, last)
        _log.info("backfill_range", job=args.job, group=settings.kafka.group_id, **planned.describe())
        if planned.kept:
            _log.warning(
                "backfill_range_of_the_job",
                partitions=sorted(f"{t}[{p}]" for t, p in planned.kept),
                hint="this job's commits record the range its first run resolved; it finishes that one. "
                "Another range wants another --job",
            )
        source.note(planned.notes)
        if planned.ranges.done:  # before the model's warm-up and measurements: a finished job costs nothing
            source.close()
            _report(args.job, planned, {}, 0.0, done=True, nothing=True)
            return EXIT_OK
        service = starting.warm()
        progress = Progress(
            planned.ranges.total, starting.metrics.registry, interval_s=args.progress_interval
        )

        def finish() -> None:
            # The range is read. Assembled rows still open close on their deadline first, so that the
            # messages that fed them are answered too.
            if not pipeline.open_rows:
                pipeline.stop()

        pipeline = service.pipeline(RangeSource(source, planned.ranges, finish, progress))
        begun = time.monotonic()
        service.serve(pipeline)
        wall_s = time.monotonic() - begun
        progress.close(planned.ranges)
        done = (
            planned.ranges.done
            and not starting.stop.requested.is_set()
            and pipeline.in_flight == 0
            and pipeline.committed
        )
        _report(args.job, planned, service.telemetry.stats.summary(), wall_s, done=done)
        return EXIT_OK if done else 1


def backfill_settings(settings: Settings, job: str, output: str | None) -> Settings:
    """``settings`` with the job's group, the ``--output`` topic, and ``earliest`` as the consumer's reset:
    should retention delete the offsets a long backfill is about to read, it goes on from the oldest
    record left, never jumps to the end (``latest``, a setting of ``run``'s, would skip the rest of the
    range and still call it done). Raises UsageError naming the flag."""
    if not _JOB.fullmatch(job):
        raise UsageError("--job", "use 1-200 letters, digits, '.', '_' or '-'")
    if output is not None and output in settings.input.topics:
        raise UsageError("--output", "is one of the input topics")
    group = job_group(settings.kafka.group_id, job)
    kafka = settings.kafka.model_copy(update={"group_id": group, "auto_offset_reset": "earliest"})
    update: dict[str, Any] = {"kafka": kafka}
    if output:
        update["output"] = settings.output.model_copy(update={"topic": output})
    return settings.model_copy(update=update)


def offline_batch(batch: BatchSettings, size: int) -> BatchSettings:
    """Batches cut full at ``size``: no adaptive target, no natural cuts; a window
    (:data:`OFFLINE_WAIT_MS`) that a range read from a backlog never reaches, and that cuts a batch only
    when reading stalls (back-pressure holding the consumer while fewer than ``size`` messages can be in
    flight, as with assembled rows of many messages each; a slow broker); text chosen among the batcher's
    ``POOL_BATCHES`` batches' worth of lines, as when streaming. The last batch is cut when the loop
    finishes."""
    return batch.model_copy(
        update={
            "adaptive": False,
            "natural": False,
            "max_size": size,
            "max_wait_ms": OFFLINE_WAIT_MS,
        }
    )


def _report(
    job: str, planned: Plan, totals: dict[str, Any], wall_s: float, *, done: bool, nothing: bool = False
) -> None:
    """The summary: logged, and printed as one JSON object on stdout for scripts."""
    events = totals.get("events_in", 0)
    summary = {
        "job": job,
        "done": done,
        "events": events,
        "results": totals.get("results_out", 0),
        "dead_letters": totals.get("dead_letters", 0),
        "events_per_s": round(events / wall_s) if wall_s > 0 else 0,
        "batch_sizes": totals.get("batch_sizes", {}),
        "mean_batch_size": totals.get("mean_batch_size"),
        "wall_s": round(wall_s, 3),
        "range_offsets": planned.ranges.total,
        "resumed": bool(planned.resumed),
    }
    if nothing:
        hint = "this job already covered the range; another --job reads it again"
        _log.info("backfill_nothing_to_do", hint=hint)
    elif done:
        _log.info("backfill_done", **summary)
    else:
        _log.warning("backfill_incomplete", hint="run again with the same --job to resume", **summary)
    print(msgspec.json.encode(summary).decode(), flush=True)

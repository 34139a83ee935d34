"""bench/stages.py and the pure edges of bench/profile.py: py-spy's raw stacks to stages, the apportioning of
measured CPU to microseconds per event, and the table. The measuring itself (a broker, the service, py-spy
attached to it) runs in ``python -m bench.profile``; here only text and numbers go in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import profile, stages
from bench.stages import (
    BATCHING,
    CONSUME,
    DECODE,
    DELIVERY,
    FEATURES,
    LOOP,
    MODEL,
    NATIVE_KAFKA,
    NATIVE_OTHER,
    OFFSETS,
    OTHER,
    POSTPROCESS,
    PRODUCE,
    TELEMETRY,
    Frame,
    Stack,
    Window,
)

FIXTURE = Path(__file__).parents[2] / "fixtures" / "profile" / "service-drain.raw"

# The loop's thread, down to the pipeline (py-spy's short file names, its qualified function names).
LOOP_ROOT = (
    "<module> (service/__main__.py:7);main (service/cli.py:104);execute (service/cli.py:122);"
    "run (service/app.py:40);Service.run (service/app.py:61);Pipeline.run (service/flow/pipeline.py:58)"
)
ENGINE_ROOT = (
    "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045);"
    "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:83);"
    "_WorkItem.run (concurrent/futures/thread.py:58)"
)


def stack(*frames: str, root: str = LOOP_ROOT) -> Stack:
    return stages.parse_raw(";".join([root, *frames]) + " 1")[0]


# -- parsing --------------------------------------------------------------------------------------------


def test_parse_raw_reads_threads_frames_and_counts() -> None:
    text = (
        "thread (4242): MainThread;<module> (service/__main__.py:7);"
        "Pipeline.run (service/flow/pipeline.py:58) 17\n"
        "thread (0x7F00AB): microbatch-engine_0;Engine.run (service/engine/session.py) 3\n"
        "Pipeline.run (service/flow/pipeline.py:58) 2\n"
        "\n"
        "py-spy> not a stack\n"
    )
    first, second, third = stages.parse_raw(text)
    assert first == Stack(
        4242,
        "MainThread",
        (Frame("<module>", "service/__main__.py"), Frame("Pipeline.run", "service/flow/pipeline.py")),
        17,
    )
    assert (second.thread, second.thread_name, second.frames[0].filename) == (
        0x7F00AB,
        "microbatch-engine_0",
        "service/engine/session.py",
    )
    assert (third.thread, third.count) == (None, 2)


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("service/flow/batcher.py", "service/flow/batcher.py"),
        ("/work/main/service/flow/batcher.py", "service/flow/batcher.py"),
        (
            "/work/main/.venv/lib/python3.11/site-packages/onnxruntime/capi/onnxruntime_inference_collection.py",
            "onnxruntime/capi/onnxruntime_inference_collection.py",
        ),
        (
            "/root/.pyenv/versions/3.11.7/lib/python3.11/concurrent/futures/thread.py",
            "concurrent/futures/thread.py",
        ),
        ("threading.py", "threading.py"),
    ],
)
def test_module_path_starts_at_the_package_root(filename: str, expected: str) -> None:
    assert stages.module_path(filename) == expected


@pytest.mark.parametrize(
    ("qualified", "expected"),
    [
        ("Sink.poll", "poll"),
        ("consume", "consume"),
        ("Outputs.batch.<locals>.<listcomp>", "batch"),
        ("Source.subscribe.<locals>.assigned", "assigned"),
        ("<module>", "<module>"),
    ],
)
def test_function_name(qualified: str, expected: str) -> None:
    assert stages.function_name(qualified) == expected


# -- attribution ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        # Consumer.consume is C: the innermost frame is Source.consume.
        (
            [
                "Pipeline._consume (service/flow/pipeline.py:104)",
                "Pipeline._take (service/flow/pipeline.py:130)",
                "Source.consume (service/kafka/source.py:103)",
            ],
            CONSUME,
        ),
        (
            ["Pipeline._take (service/flow/pipeline.py:130)", "to_record (service/kafka/source.py:190)"],
            CONSUME,
        ),
        (
            [
                "Pipeline._accept (service/flow/pipeline.py:139)",
                "Decoder.decode (service/flow/decode.py:150)",
                "Decoder._items (service/flow/decode.py:190)",
                "FeaturesProcessor.parse (service/processors/features.py:72)",
                "parse_json (service/formats/plain.py:20)",
            ],
            DECODE,
        ),
        (
            [
                "Decoder.decode (service/flow/decode.py:150)",
                "FeaturesProcessor.parse (service/processors/features.py:72)",
            ],
            DECODE,
        ),
        (
            [
                "Decoder.decode (service/flow/decode.py:150)",
                "prepare_all (service/flow/decode.py:80)",
                "TextProcessor.prepare (service/processors/text.py:138)",
            ],
            FEATURES,
        ),
        (
            [
                "Pipeline._dispatch (service/flow/pipeline.py:164)",
                "Inference.submit (service/flow/inference.py:85)",
                "FeaturesProcessor.preprocess (service/processors/features.py:87)",
            ],
            FEATURES,
        ),
        # Inline inference (no hand-off) on the loop's thread.
        (
            [
                "Inference.submit (service/flow/inference.py:91)",
                "Inline.submit (service/flow/inflight.py:70)",
                "timed_run (service/flow/inflight.py:35)",
                "Engine.run (service/engine/session.py:100)",
                "InferenceSession.run (onnxruntime/capi/onnxruntime_inference_collection.py:220)",
            ],
            MODEL,
        ),
        (
            [
                "Pipeline._finish (service/flow/pipeline.py:169)",
                "Inference.finished (service/flow/inference.py:113)",
                "Model.postprocess (service/flow/model.py:70)",
                "FeaturesProcessor.postprocess (service/processors/features.py:91)",
                "Results.__call__ (service/processors/outputs.py:80)",
            ],
            POSTPROCESS,
        ),
        (
            [
                "Pipeline._emit (service/flow/pipeline.py:174)",
                "Outputs.batch (service/flow/outputs.py:63)",
                "result_record (service/flow/encode.py:55)",
            ],
            POSTPROCESS,
        ),
        (["Outputs.batch.<locals>.<listcomp> (service/flow/outputs.py:63)"], POSTPROCESS),
        (
            [
                "Outputs.batch (service/flow/outputs.py:75)",
                "Sink.send_all (service/kafka/sink.py:69)",
                "Batch.produce_all (service/kafka/delivery.py:70)",
            ],
            PRODUCE,
        ),
        (
            ["Outputs.batch (service/flow/outputs.py:75)", "Batch.__init__ (service/kafka/delivery.py:48)"],
            PRODUCE,
        ),
        # Delivery reports are served inside Producer.poll (C), from Sink.poll.
        (
            [
                "Checkpoint.poll (service/flow/checkpoint.py:95)",
                "Sink.poll (service/kafka/sink.py:96)",
            ],
            DELIVERY,
        ),
        (
            [
                "Sink.poll (service/kafka/sink.py:96)",
                "Batch.__call__ (service/kafka/delivery.py:58)",
                "Batch._count_down (service/kafka/delivery.py:97)",
                "Sink._batch_done (service/kafka/sink.py:137)",
            ],
            DELIVERY,
        ),
        (
            [
                "Checkpoint.poll (service/flow/checkpoint.py:95)",
                "Checkpoint.acknowledge (service/flow/checkpoint.py:101)",
                "OffsetTracker.done_run (service/flow/offsets.py:120)",
            ],
            OFFSETS,
        ),
        (
            [
                "Checkpoint.acknowledge (service/flow/checkpoint.py:107)",
                "Source.store (service/kafka/source.py:133)",
            ],
            OFFSETS,
        ),
        (
            [
                "Pipeline._accept (service/flow/pipeline.py:136)",
                "Checkpoint.track (service/flow/checkpoint.py:63)",
            ],
            OFFSETS,
        ),
        (
            [
                "Pipeline._accept (service/flow/pipeline.py:136)",
                "Checkpoint.track (service/flow/checkpoint.py:63)",
                "InputRecord.tp (service/flow/records.py:43)",
            ],
            OFFSETS,
        ),
        (
            [
                "Pipeline._queue (service/flow/pipeline.py:158)",
                "Batcher.add_all (service/flow/batcher.py:100)",
            ],
            BATCHING,
        ),
        (
            [
                "Pipeline._emit (service/flow/pipeline.py:176)",
                "Backlog.total (service/flow/backlog.py:39)",
                "Backlog._refresh (service/flow/backlog.py:48)",
                "Source.lag (service/kafka/source.py:124)",
            ],
            BATCHING,
        ),
        (
            [
                "Pipeline._emit (service/flow/pipeline.py:177)",
                "BatchPolicy.observe (service/flow/sizing.py:280)",
            ],
            BATCHING,
        ),
        (
            [
                "Outputs.batch (service/flow/outputs.py:78)",
                "Telemetry.batch (service/observability/telemetry.py:70)",
                "Metrics.batch (service/observability/metrics.py:284)",
                "MetricWrapperBase.inc (prometheus_client/metrics.py:300)",
            ],
            TELEMETRY,
        ),
        (
            [
                "Pipeline.run (service/flow/pipeline.py:56)",
                "BoundLoggerLazyProxy.info (structlog/_config.py:400)",
            ],
            TELEMETRY,
        ),
        (["Pipeline._consume_plan (service/flow/pipeline.py:118)"], LOOP),
        (
            ["Inference.finished (service/flow/inference.py:105)", "wait (concurrent/futures/_base.py:300)"],
            LOOP,
        ),
        (["BackPressure.apply (service/flow/backpressure.py:33)"], LOOP),
        # numpy has no stage of its own: the caller's.
        (
            [
                "Inference.submit (service/flow/inference.py:85)",
                "FeaturesProcessor.preprocess (service/processors/features.py:87)",
                "reshape (numpy/core/fromnumeric.py:285)",
            ],
            FEATURES,
        ),
    ],
)
def test_the_innermost_frame_with_a_stage_decides(frames: list[str], expected: str) -> None:
    assert stages.attribute(stack(*frames)) == expected


def test_the_inference_thread_in_onnxruntime_is_model_and_between_batches_loop_control() -> None:
    running = stack(
        "timed_run (service/flow/inflight.py:35)",
        "Engine.run (service/engine/session.py:100)",
        "InferenceSession.run (onnxruntime/capi/onnxruntime_inference_collection.py:220)",
        root=ENGINE_ROOT,
    )
    between = stack("_worker (concurrent/futures/thread.py:81)", root=ENGINE_ROOT.rsplit(";", 1)[0])
    assert stages.attribute(running) == MODEL
    assert stages.attribute(between) == LOOP


def test_waits_of_the_standard_library_are_not_busy() -> None:
    text = (
        f"thread (11): engine;{ENGINE_ROOT.rsplit(';', 1)[0]} 7\n"
        f"thread (10): MainThread;{LOOP_ROOT};Pipeline._finish (service/flow/pipeline.py:169);"
        "Inference.finished (service/flow/inference.py:105);wait (concurrent/futures/_base.py:305);"
        "Condition.wait (threading.py:327) 3\n"
        "thread (12): metrics-http;BaseServer.serve_forever (socketserver.py:233);"
        "_PollLikeSelector.select (selectors.py:415) 2\n"
        f"thread (10): MainThread;{LOOP_ROOT};Source.consume (service/kafka/source.py:103) 4\n"
    )
    stacks = stages.parse_raw(text)
    assert [stages.waiting(s) for s in stacks] == [True, True, True, False]
    assert stages.tally(stacks) == {10: {CONSUME: 4}}


def test_wait_share_is_run_queue_time_over_sampled_time() -> None:
    threads = [
        {"thread": 10, "samples": 500, "run_queue_wait_s": 0.5},  # 2 s sampled at 250/s
        {"thread": 11, "samples": 0, "run_queue_wait_s": 0.3},  # not sampled: not counted
    ]
    assert stages.wait_share(threads, 250) == 0.25
    assert stages.wait_share([], 250) is None


def test_a_stack_without_a_staged_frame_is_other() -> None:
    assert stages.attribute(stack("sleep (time.py:1)", root="Thread._bootstrap (threading.py:1002)")) == OTHER
    assert stages.attribute(Stack(1, None, (), 3)) == OTHER


def test_tally_counts_samples_per_thread_and_stage() -> None:
    text = (
        f"thread (10): MainThread;{LOOP_ROOT};Source.consume (service/kafka/source.py:103) 5\n"
        f"thread (10): MainThread;{LOOP_ROOT};Sink.poll (service/kafka/sink.py:96) 2\n"
        f"thread (10): MainThread;{LOOP_ROOT};Source.consume (service/kafka/source.py:105) 1\n"
        f"thread (11): engine;{ENGINE_ROOT};Engine.run (service/engine/session.py:100) 4\n"
    )
    assert stages.tally(stages.parse_raw(text)) == {10: {CONSUME: 6, DELIVERY: 2}, 11: {MODEL: 4}}


def test_the_recorded_profile_of_a_real_drain_parses_and_its_service_stacks_have_stages() -> None:
    stacks = stages.parse_raw(FIXTURE.read_text())
    assert stacks
    assert all(s.thread is not None and s.frames for s in stacks)
    attributed = {stages.attribute(s) for s in stacks}
    assert {CONSUME, DECODE, PRODUCE, DELIVERY, OFFSETS, POSTPROCESS} <= attributed
    for s in stacks:  # a stack through the service never falls through to "other"
        if any(stages.module_path(f.filename).startswith("service/") for f in s.frames):
            assert stages.attribute(s) != OTHER, s


# -- apportioning ---------------------------------------------------------------------------------------


def test_each_threads_cpu_is_split_by_its_own_samples_and_native_threads_apart() -> None:
    window = Window(
        seconds=2.0,
        samples={10: {CONSUME: 30, DECODE: 10}, 11: {MODEL: 20}},
        thread_cpu_s={
            10: ("python", 0.8),
            11: ("python", 0.2),
            12: ("rdk:broker1", 0.15),
            13: ("rdk:main", 0.05),
            14: ("python", 0.1),  # ONNX Runtime's pool: no Python frames
        },
        process_cpu_s=1.4,
        events=100_000,
    )
    figures = stages.apportion(window)
    rows = {row["stage"]: row for row in figures["stages"]}
    assert figures["busy_samples"] == 60
    # Shares of the Python threads' CPU (1.0 s): the loop's 0.8 s split 3:1, the engine thread's 0.2 s.
    assert (rows[CONSUME]["share"], rows[DECODE]["share"], rows[MODEL]["share"]) == (0.6, 0.2, 0.2)
    # 0.8 s x 30/40 over 100,000 events: 6 us; 0.8 x 10/40: 2 us; the engine thread's 0.2 s: 2 us.
    assert (rows[CONSUME]["us_per_event"], rows[DECODE]["us_per_event"], rows[MODEL]["us_per_event"]) == (
        6.0,
        2.0,
        2.0,
    )
    assert rows[NATIVE_KAFKA]["us_per_event"] == 2.0  # 0.15 + 0.05 s
    assert rows[NATIVE_OTHER]["us_per_event"] == 2.0  # 1.4 - 1.0 (Python) - 0.2 (librdkafka)
    assert rows[NATIVE_KAFKA]["share"] is None
    assert figures["total_us_per_event"] == 14.0
    assert figures["cpu_percent"] == 70.0
    stage_sum = sum(row["us_per_event"] for row in figures["stages"])
    assert stage_sum == pytest.approx(figures["total_us_per_event"])


def test_unmatched_samples_get_no_cpu_and_no_events_no_figures() -> None:
    window = Window(1.0, {None: {CONSUME: 5}}, {1: ("python", 0.5)}, 0.5, 0)
    figures = stages.apportion(window)
    rows = {row["stage"]: row for row in figures["stages"]}
    assert rows[CONSUME]["samples"] == 5
    assert rows[CONSUME]["share"] is None
    assert rows[CONSUME]["cpu_s"] == 0.0
    assert rows[NATIVE_OTHER]["cpu_s"] == 0.5
    assert figures["total_us_per_event"] is None


def test_parse_task_stat_counts_fields_after_the_name() -> None:
    line = "4242 (rdk:broker (1) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 30 0 123 4096 512"
    assert stages.parse_task_stat(line) == ("rdk:broker (1) x", 325.0)


def test_thread_deltas_count_a_new_thread_from_zero() -> None:
    before = {1: ("python", 1.0), 2: ("rdk:main", 0.5)}
    after = {1: ("python", 1.75), 2: ("rdk:main", 0.5), 3: ("rdk:broker1", 0.25)}
    assert stages.thread_deltas(before, after) == {
        1: ("python", 0.75),
        2: ("rdk:main", 0.0),
        3: ("rdk:broker1", 0.25),
    }


def test_counted_takes_the_services_counters_over_the_window() -> None:
    before = {
        "microbatch_results_produced_total": 1000.0,
        "microbatch_events_consumed_total": 1100.0,
        "microbatch_batch_size_count": 10.0,
        "microbatch_batch_size_sum": 1000.0,
    }
    after = {
        "microbatch_results_produced_total": 5000.0,
        "microbatch_events_consumed_total": 5200.0,
        "microbatch_batch_size_count": 60.0,
        "microbatch_batch_size_sum": 5000.0,
    }
    assert stages.counted(before, after) == {
        "events": 4000.0,
        "consumed": 4100.0,
        "batches": 50.0,
        "mean_batch_size": 80.0,
    }
    assert stages.counted(before, before)["mean_batch_size"] is None


def test_threads_table_names_python_threads_as_py_spy_saw_them() -> None:
    text = f"thread (10): MainThread;{LOOP_ROOT} 4\n"
    cpu = {10: ("python", 0.5), 12: ("rdk:main", 0.1), 13: ("python", 0.0)}
    assert stages.threads_table(stages.parse_raw(text), cpu) == [
        {"thread": 10, "name": "MainThread", "cpu_s": 0.5, "samples": 4},
        {"thread": 12, "name": "rdk:main", "cpu_s": 0.1, "samples": 0},
    ]


def test_py_spy_summary() -> None:
    said = (
        "py-spy> Sampling process 250 times a second\npy-spy> Wrote raw data to 'x'. Samples: 748 Errors: 2\n"
    )
    assert stages.py_spy_summary(said) == {"written": 748, "errors": 2}
    assert stages.py_spy_summary("nothing") == {}


# -- the table ------------------------------------------------------------------------------------------


def phase(total: float, consume: tuple[float, float], kafka: float, **extra: object) -> dict[str, object]:
    rows = [
        {"stage": s, "samples": 0, "share": 0.0, "cpu_s": 0.0, "us_per_event": 0.0} for s in stages.STAGES
    ]
    rows[0] = {"stage": CONSUME, "samples": 50, "share": consume[1], "cpu_s": 0.1, "us_per_event": consume[0]}
    rows += [
        {"stage": NATIVE_KAFKA, "samples": None, "share": None, "cpu_s": 0.1, "us_per_event": kafka},
        {"stage": NATIVE_OTHER, "samples": None, "share": None, "cpu_s": 0.0, "us_per_event": 0.0},
    ]
    return {
        "window_s": 3.01,
        "events": 240_000.0,
        "events_per_s": 79_734.2,
        "mean_batch_size": 128.5,
        "cpu_percent": 160.2,
        "busy_samples": 1_400,
        "load_average_1m": [1.52, 1.75],
        "stages": rows,
        "total_us_per_event": total,
        **extra,
    }


RESULT = {
    "run": {"id": "r1", "date": "2026-12-05T20:00:00+00:00"},
    "machine": {"cores": 2, "cpu_model": "Some CPU"},
    "settings": {"rate_hz": 250},
    "models": {
        "metrics-anomaly": {
            "drain": phase(20.1, (3.456, 0.254), 4.0, inside=True),
            "light": phase(61.0, (12.34, 0.2), 11.0, rate_per_s=2000.0, inside=None),
        }
    },
}


def test_render_is_one_table_with_a_column_per_model_and_phase() -> None:
    text = stages.render([RESULT])
    lines = text.splitlines()
    assert lines[0] == (
        "| us of CPU per event (share of the Python threads' CPU) | metrics-anomaly, drain "
        "| metrics-anomaly, 2,000/s |"
    )
    assert lines[1] == "| --- | --- | --- |"
    assert "| consume | 3.46 (25%) | 12.3 (20%) |" in lines
    assert "| native: librdkafka threads | 4.00 | 11.0 |" in lines
    assert "| **total: the process's CPU per event** | **20.1** | **61.0** |" in lines
    # Stages with neither samples nor CPU in any column are left out.
    assert not any(
        line.startswith(f"| {DECODE} |") or line.startswith(f"| {NATIVE_OTHER} |") for line in lines
    )
    assert any(
        "drain: 240,000 results in a window of 3.0 s (79,734/s), mean batch 128.5" in line for line in lines
    )
    assert any("load average (1 min) 1.52 and 1.75" in line for line in lines)
    assert any("Run of 2026-12-05T20:00:00+00:00: 2 cores (Some CPU)" in line for line in lines)


def test_render_says_when_the_backlog_ran_out() -> None:
    result = json.loads(json.dumps(RESULT))
    result["models"]["metrics-anomaly"]["drain"]["inside"] = False
    assert "the backlog ran out within the window" in stages.render([result])
    assert stages.render([]) == "No profile.\n"


def test_replace_block_touches_only_the_marked_text() -> None:
    doc = f"# T\n\nbefore\n{stages.BEGIN}\nold\n{stages.END}\nafter\n"
    assert (
        stages.replace_block(doc, "new\n") == f"# T\n\nbefore\n{stages.BEGIN}\n\nnew\n\n{stages.END}\nafter\n"
    )
    with pytest.raises(ValueError, match="no"):
        stages.replace_block("no markers", "x")


def test_main_renders_results_files_into_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "profile.json"
    results.write_text(json.dumps(RESULT))
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"intro\n{stages.BEGIN}\n{stages.END}\nrest\n")
    assert profile.main(["--render", str(results), "--doc", str(doc)]) == 0
    written = doc.read_text()
    assert "| consume | 3.46 (25%) | 12.3 (20%) |" in written
    assert written.startswith("intro\n") and written.endswith(f"{stages.END}\nrest\n")
    assert "| consume |" in capsys.readouterr().out

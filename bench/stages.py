"""Where the service's CPU goes per event, stage by stage: py-spy's raw stacks attributed to stages, the
arithmetic that turns sample counts and measured CPU seconds into microseconds per event, and the Markdown
table of them. Pure: text and numbers in, numbers and text out; ``bench/profile.py`` does the measuring.

A sampled stack belongs to ONE stage: that of its innermost frame that has one (:func:`stage_of`). Frames
of modules that serve every stage (``numpy``, ``threading``, the record types) have none, so their time goes
to the code that called them; a stack with no such frame at all is ``other``.

Microseconds per event apportion measured CPU by sampled shares, thread by thread: each Python thread's CPU
over the window (the kernel's count for that thread) is split by that thread's own samples, then divided by
the events the service produced in the window. Native threads are not sampled (py-spy sees Python frames
only), so their CPU is measured and shown apart: librdkafka's (named ``rdk:*`` by librdkafka) and the rest
(ONNX Runtime's intra-op pool, and threads that ended within the window), which is the process's CPU minus
every thread counted before it.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONSUME = "consume"
DECODE = "decode"
FEATURES = "features"
MODEL = "model"
POSTPROCESS = "postprocess & encode"
PRODUCE = "produce"
DELIVERY = "delivery callbacks"
OFFSETS = "offsets"
BATCHING = "batching & policy"
TELEMETRY = "telemetry"
LOOP = "loop control"
OTHER = "other"
STAGES = (
    CONSUME,
    DECODE,
    FEATURES,
    MODEL,
    POSTPROCESS,
    PRODUCE,
    DELIVERY,
    OFFSETS,
    BATCHING,
    TELEMETRY,
    LOOP,
    OTHER,
)
"""Every stage, in the order of an event's way through the service."""

NATIVE_KAFKA = "native: librdkafka threads"
NATIVE_OTHER = "native: other threads (ONNX Runtime's pool)"
NATIVE = (NATIVE_KAFKA, NATIVE_OTHER)
_KAFKA_THREAD = "rdk:"  # librdkafka names its threads rdk:main, rdk:broker1, ...

PHASES = ("drain", "light")
BEGIN = "<!-- profile:begin -->"
END = "<!-- profile:end -->"
COUNTERS = {
    "events": "microbatch_results_produced_total",
    "consumed": "microbatch_events_consumed_total",
    "batches": "microbatch_batch_size_count",
    "batch_items": "microbatch_batch_size_sum",
}
"""The service's counters read over a window (service/observability/metrics.py), summed over labels."""


@dataclass(frozen=True, slots=True)
class Rule:
    """Frames of modules under ``prefix`` (a path from a package root: ``service/flow/batcher.py``,
    ``onnxruntime/``), of one of ``functions`` when given, belong to ``stage``; None: to no stage (their
    caller's)."""

    prefix: str
    stage: str | None
    functions: frozenset[str] | None = None


WIDTH = 110
"""The notes under the table are wrapped at this width, as the docs' prose is."""


def _rule(prefix: str, stage: str | None, *functions: str) -> Rule:
    return Rule(prefix, stage, frozenset(functions) if functions else None)


RULES = (
    # The input edge. Consumer.consume is C: its time shows as Source.consume's own.
    _rule("service/kafka/source.py", CONSUME, "consume", "to_record", "_on_message_error"),
    _rule("service/kafka/source.py", OFFSETS, "store", "_store", "commit"),
    _rule("service/kafka/source.py", BATCHING, "lag"),  # read for the batch-size policy (flow/backlog.py)
    _rule("service/kafka/source.py", LOOP),  # subscribe, rebalance callbacks, pause and resume
    _rule("service/kafka/access.py", CONSUME),  # what each consume is told of READ access
    # The output edge. Producer.poll serves the delivery reports in C and calls the callbacks from there:
    # its time shows as Sink.poll's own.
    _rule("service/kafka/delivery.py", PRODUCE, "__init__", "produce_all", "not_queued"),
    _rule("service/kafka/delivery.py", DELIVERY),
    _rule("service/kafka/sink.py", PRODUCE, "send_all", "send"),
    _rule("service/kafka/sink.py", DELIVERY),
    _rule("service/kafka/watch.py", None),  # the fatal-error check of both clients
    _rule("service/flow/decode.py", FEATURES, "prepare_all"),
    _rule("service/flow/decode.py", DECODE),
    _rule("service/flow/fields.py", DECODE),
    _rule("service/formats/", DECODE),
    _rule("service/processors/outputs.py", POSTPROCESS),
    _rule("service/processors/", POSTPROCESS, "postprocess"),
    _rule("service/processors/", DECODE, "parse", "parse_fields", "required_field", "_line", "_finite"),
    _rule("service/processors/", FEATURES),  # prepare (tokenising), cost, preprocess (tensors, padding)
    _rule("service/flow/model.py", POSTPROCESS, "postprocess"),
    _rule("service/flow/model.py", MODEL),
    _rule("service/engine/", MODEL),
    _rule("onnxruntime/", MODEL),
    _rule("service/flow/encode.py", POSTPROCESS),
    _rule("service/flow/outputs.py", POSTPROCESS),  # one output record per item
    _rule("service/flow/offsets.py", OFFSETS),
    _rule("service/flow/checkpoint.py", OFFSETS),
    _rule("service/flow/batcher.py", BATCHING),
    _rule("service/flow/sizing.py", BATCHING),
    _rule("service/flow/assembly.py", BATCHING),
    _rule("service/flow/backlog.py", BATCHING),
    _rule("service/assemble/", BATCHING),
    _rule("service/observability/", TELEMETRY),
    _rule("prometheus_client/", TELEMETRY),
    _rule("structlog/", TELEMETRY),
    _rule("logging/", TELEMETRY),
    _rule("socketserver.py", TELEMETRY),  # the metrics server's thread
    _rule("wsgiref/", TELEMETRY),
    _rule("service/flow/records.py", None),
    _rule("service/errors.py", None),
    # The rest of the service: the loop (flow/pipeline.py), the hand-off to the inference thread
    # (flow/inference.py, flow/inflight.py, concurrent.futures), back-pressure, start-up.
    _rule("concurrent/futures/", LOOP),
    _rule("service/", LOOP),
)
"""First match wins: a module's rules for named functions come before its rule for the rest."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a sampled stack: the function's (qualified) name and its file as py-spy shows it."""

    function: str
    filename: str


@dataclass(frozen=True, slots=True)
class Stack:
    """One distinct stack of a raw profile, outermost frame first, and how many samples had it. ``thread``:
    the OS thread id (py-spy's ``--threads``), None without it."""

    thread: int | None
    thread_name: str | None
    frames: tuple[Frame, ...]
    count: int


_THREAD = re.compile(r"thread \((?P<id>0x[0-9A-Fa-f]+|\d+)\)(?::\s*(?P<name>.*))?")
_FRAME = re.compile(r"(?P<function>.*?) \((?P<file>.*?)(?::\d+)?\)")
_ROOTS = (
    re.compile(r"^.*/site-packages/"),
    re.compile(r"^.*/lib/python3\.\d+/"),
    re.compile(r"^.*/(?=service/)"),
)


def parse_raw(text: str) -> list[Stack]:
    """The stacks of py-spy's raw (folded) output, ``frame;frame;... count`` per line, the thread (with
    ``--threads``) as the first frame: ``thread (4242): MainThread;run (service/app.py:50);... 17``.
    Lines that do not end in a count are skipped."""
    stacks = []
    for line in text.splitlines():
        body, _, count = line.rstrip().rpartition(" ")
        if not body or not count.isdigit():
            continue
        parts = body.split(";")
        thread: int | None = None
        name: str | None = None
        if match := _THREAD.fullmatch(parts[0]):
            thread, name = int(match["id"], 0), match["name"]
            parts = parts[1:]
        frames = tuple(_frame(part) for part in parts if part)
        stacks.append(Stack(thread, name, frames, int(count)))
    return stacks


def _frame(text: str) -> Frame:
    match = _FRAME.fullmatch(text)
    return Frame(match["function"], match["file"]) if match else Frame(text, "")


def module_path(filename: str) -> str:
    """``filename`` from its package root: ``.../site-packages/onnxruntime/capi/x.py`` ->
    ``onnxruntime/capi/x.py``, ``/repo/service/flow/batcher.py`` -> ``service/flow/batcher.py``; py-spy's
    short names (the default) are that already."""
    name = filename.replace("\\", "/")
    for root in _ROOTS:
        if root.match(name):
            return root.sub("", name, count=1)
    return name


def function_name(qualified: str) -> str:
    """The function a qualified name is about: ``Sink.poll`` -> ``poll``; a comprehension, lambda or
    closure is its enclosing function's (``Outputs.batch.<locals>.<listcomp>`` -> ``batch``), except a
    named closure, which is itself (``Source.subscribe.<locals>.assigned`` -> ``assigned``)."""
    parts = [part for part in qualified.split(".") if not part.startswith("<")]
    return parts[-1] if parts else qualified


def stage_of(frame: Frame) -> str | None:
    """The stage ``frame`` belongs to by :data:`RULES`; None when none (or its rule says its caller's)."""
    path, function = module_path(frame.filename), function_name(frame.function)
    for rule in RULES:
        if path.startswith(rule.prefix) and (rule.functions is None or function in rule.functions):
            return rule.stage
    return None


def attribute(stack: Stack) -> str:
    """The stage of ``stack``: that of its innermost frame that has one; :data:`OTHER` if none has."""
    for frame in reversed(stack.frames):
        if (stage := stage_of(frame)) is not None:
            return stage
    return OTHER


_WAITS = (
    ("concurrent/futures/thread.py", "_worker"),  # the inference thread waiting for a batch
    ("threading.py", None),  # Condition.wait, Event.wait: a batch's result, a thread's end
    ("selectors.py", None),  # the metrics server between requests
)


def waiting(stack: Stack) -> bool:
    """Whether ``stack`` is a thread waiting in a blocking call py-spy took for busy: one whose innermost
    frame is a wait of the standard library. Paused sampling does that now and then."""
    if not stack.frames:
        return False
    frame = stack.frames[-1]
    path, function = module_path(frame.filename), function_name(frame.function)
    return any(path == where and (name is None or function == name) for where, name in _WAITS)


def tally(stacks: Iterable[Stack]) -> dict[int | None, Counter[str]]:
    """Busy samples per thread and stage; stacks that are waits (:func:`waiting`) are not busy."""
    threads: dict[int | None, Counter[str]] = {}
    for stack in stacks:
        if not waiting(stack):
            threads.setdefault(stack.thread, Counter())[attribute(stack)] += stack.count
    return threads


@dataclass(frozen=True, slots=True)
class Window:
    """What was measured over one sampling window.

    ``samples``: busy samples per thread and stage (:func:`tally`); ``thread_cpu_s``: CPU seconds each
    thread of the process used over the window, with its name (``/proc/<pid>/task/<tid>``);
    ``process_cpu_s``: the whole process's; ``events``: results the service produced in the window."""

    seconds: float
    samples: Mapping[int | None, Mapping[str, int]]
    thread_cpu_s: Mapping[int, tuple[str, float]]
    process_cpu_s: float
    events: float


def apportion(window: Window) -> dict[str, Any]:
    """Per stage: its samples, its share of the sampled threads' CPU, its CPU seconds and microseconds per
    event;
    then the native threads (no samples, measured CPU), and the total (the process's CPU per event).

    Each Python thread's CPU is split by its own samples' stages; a thread's samples that cannot be
    matched to a thread of the process (py-spy gave no OS thread id) get none of it, and what they would
    have had stays in the native remainder."""
    total_samples = sum(sum(counts.values()) for counts in window.samples.values())
    per_stage: Counter[str] = Counter()
    cpu_s: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    python_cpu = 0.0
    for thread, counts in window.samples.items():
        per_stage.update(counts)
        busy = sum(counts.values())
        if thread is None or thread not in window.thread_cpu_s or not busy:
            continue
        thread_cpu = window.thread_cpu_s[thread][1]
        python_cpu += thread_cpu
        for stage, count in counts.items():
            cpu_s[stage] = cpu_s.get(stage, 0.0) + thread_cpu * count / busy
    kafka = sum(
        cpu
        for tid, (name, cpu) in window.thread_cpu_s.items()
        if name.startswith(_KAFKA_THREAD) and tid not in window.samples
    )
    native = {NATIVE_KAFKA: kafka, NATIVE_OTHER: max(0.0, window.process_cpu_s - python_cpu - kafka)}
    events = window.events
    rows = [
        {
            "stage": stage,
            "samples": per_stage.get(stage, 0),
            "share": round(cpu_s.get(stage, 0.0) / python_cpu, 4) if python_cpu else None,
            "cpu_s": round(cpu_s.get(stage, 0.0), 4),
            "us_per_event": _per_event(cpu_s.get(stage, 0.0), events),
        }
        for stage in STAGES
    ]
    rows += [
        {
            "stage": name,
            "samples": None,
            "share": None,
            "cpu_s": round(cpu, 4),
            "us_per_event": _per_event(cpu, events),
        }
        for name, cpu in native.items()
    ]
    return {
        "busy_samples": total_samples,
        "python_cpu_s": round(python_cpu, 4),
        "process_cpu_s": round(window.process_cpu_s, 4),
        "cpu_percent": round(100 * window.process_cpu_s / window.seconds, 1) if window.seconds else None,
        "stages": rows,
        "total_us_per_event": _per_event(window.process_cpu_s, events),
    }


def _per_event(cpu_s: float, events: float) -> float | None:
    return round(cpu_s / events * 1e6, 2) if events > 0 else None


def threads_table(
    stacks: Iterable[Stack],
    thread_cpu_s: Mapping[int, tuple[str, float]],
    waits_s: Mapping[int, float] | None = None,
) -> list[dict[str, Any]]:
    """Every thread of the process with its CPU seconds over the window, its busy samples and its seconds
    runnable but waiting for a CPU (``waits_s``); the Python thread's name where py-spy saw one (the
    kernel's name otherwise: ``rdk:broker1``, ``python``)."""
    seen: dict[int | None, tuple[str | None, int]] = {}
    for stack in stacks:
        name, count = seen.get(stack.thread, (stack.thread_name, 0))
        seen[stack.thread] = (name or stack.thread_name, count + stack.count)
    rows = []
    for tid, (name, cpu) in sorted(thread_cpu_s.items()):
        python_name, samples = seen.get(tid, (None, 0))
        row = {"thread": tid, "name": python_name or name, "cpu_s": cpu, "samples": samples}
        if waits_s is not None:
            row["run_queue_wait_s"] = round(waits_s.get(tid, 0.0), 4)
        if cpu or samples:
            rows.append(row)
    return rows


def waited(before: Mapping[int, float], after: Mapping[int, float]) -> dict[int, float]:
    """Run-queue seconds per thread between two readings; a thread that started in between from 0."""
    return {tid: wait - before.get(tid, 0.0) for tid, wait in after.items()}


def wait_share(threads: Sequence[Mapping[str, Any]], rate_hz: float) -> float | None:
    """The share of the busy samples of every sampled thread that were run-queue wait, not CPU: their
    run-queue seconds over their sampled seconds (samples / rate). None without samples or waits."""
    sampled = [t for t in threads if t.get("samples") and t.get("run_queue_wait_s") is not None]
    busy_s = sum(t["samples"] for t in sampled) / rate_hz if rate_hz else 0.0
    if not busy_s:
        return None
    return round(min(1.0, sum(t["run_queue_wait_s"] for t in sampled) / busy_s), 3)


def parse_task_stat(text: str) -> tuple[str, float]:
    """(name, CPU clock ticks: user + system) of a ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat``
    line. The name is in parentheses and may hold spaces and parentheses itself, so the fields are
    counted from the last ``)``."""
    open_at, close_at = text.index("("), text.rindex(")")
    fields = text[close_at + 2 :].split()
    # After the name: state(3) ppid(4) ... utime(14) stime(15), numbered from 1 as in proc(5).
    return text[open_at + 1 : close_at], float(int(fields[11]) + int(fields[12]))


def thread_deltas(
    before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]
) -> dict[int, tuple[str, float]]:
    """CPU seconds each thread used between two readings; one that started in between counts from 0."""
    return {
        tid: (name, round(cpu - before.get(tid, (name, 0.0))[1], 4)) for tid, (name, cpu) in after.items()
    }


def py_spy_summary(output: str) -> dict[str, Any]:
    """``Samples: 1234 Errors: 0`` of py-spy's last words: samples written (those with a busy thread) and
    failed reads."""
    match = re.search(r"Samples: (\d+) Errors: (\d+)", output)
    return {"written": int(match[1]), "errors": int(match[2])} if match else {}


def counted(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """The service's own counts over a window: results produced (``events``), messages consumed, batches,
    and their mean size."""
    delta = {key: after.get(name, 0.0) - before.get(name, 0.0) for key, name in COUNTERS.items()}
    batches = delta.pop("batches")
    items = delta.pop("batch_items")
    return delta | {"batches": batches, "mean_batch_size": round(items / batches, 1) if batches else None}


def render(results: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown table for every model and phase of ``results``: per stage, microseconds of CPU per
    event and, in brackets, the stage's share of the sampled (Python) threads' CPU; then a line per phase
    on what was measured, and one per run on the machine. Stages with neither samples nor CPU anywhere
    are left out."""
    columns = [
        (model, phase, figures[phase])
        for result in results
        for model, figures in result.get("models", {}).items()
        for phase in PHASES
        if figures.get(phase)
    ]
    if not columns:
        return "No profile.\n"
    heads = [f"{model}, {_phase_name(phase, figures)}" for model, phase, figures in columns]
    lines = [
        "| us of CPU per event (share of the Python threads' CPU) | " + " | ".join(heads) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for name in [*STAGES, *NATIVE]:
        cells = [_stage(figures, name) for _model, _phase, figures in columns]
        if any(cell.get("samples") or cell.get("us_per_event") for cell in cells):
            lines.append(f"| {name} | " + " | ".join(_cell(cell) for cell in cells) + " |")
    totals = [f"**{_us(figures.get('total_us_per_event'))}**" for _model, _phase, figures in columns]
    lines.append("| **total: the process's CPU per event** | " + " | ".join(totals) + " |")
    notes = [_note(model, phase, figures) for model, phase, figures in columns]
    runs = [_run_line(result) for result in results]
    bullets = [
        textwrap.fill(b, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        for b in notes + runs
    ]
    return "\n".join(lines) + "\n\n" + "\n".join(bullets) + "\n"


def _phase_name(phase: str, figures: Mapping[str, Any]) -> str:
    return "drain" if phase == "drain" else f"{figures.get('rate_per_s') or 0:,.0f}/s"


def _stage(figures: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next((row for row in figures.get("stages", []) if row["stage"] == name), {})


def _cell(row: Mapping[str, Any]) -> str:
    us, share = row.get("us_per_event"), row.get("share")
    if us is None:
        return "-"
    return _us(us) if share is None else f"{_us(us)} ({share:.0%})"


def _us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _note(model: str, phase: str, figures: Mapping[str, Any]) -> str:
    inside = "" if figures.get("inside") in (True, None) else " (the backlog ran out within the window)"
    loads = " and ".join(f"{x:.2f}" for x in figures.get("load_average_1m") or [])
    return (
        f"- {model}, {_phase_name(phase, figures)}: {figures.get('events', 0):,.0f} results in a window "
        f"of {figures.get('window_s', 0):.1f} s ({figures.get('events_per_s') or 0:,.0f}/s), mean batch "
        f"{figures.get('mean_batch_size')}, process CPU {figures.get('cpu_percent')}% of one core, "
        f"{figures.get('busy_samples', 0):,} busy samples{_waiting(figures)}{inside}; load average (1 min) "
        f"{loads or 'n/a'} at its start and end."
    )


def _waiting(figures: Mapping[str, Any]) -> str:
    share = figures.get("run_queue_wait_share")
    return "" if share is None else f" ({share:.0%} of them runnable, waiting for a CPU)"


def _run_line(result: Mapping[str, Any]) -> str:
    machine, settings = result.get("machine", {}), result.get("settings", {})
    return (
        f"- Run of {result.get('run', {}).get('date', '?')}: {machine.get('cores', '?')} cores "
        f"({machine.get('cpu_model', '?')}), the broker on the same machine; py-spy at "
        f"{settings.get('rate_hz', '?')} samples/s, or {settings.get('paused_rate_hz', '?')} pausing the "
        "service for each (at light load)."
    )


def replace_block(document: str, block: str) -> str:
    """``document`` with the text between the profile markers replaced by ``block``. Raises ValueError
    when the markers are missing or out of order."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN} ... {END} block")
    return document[: start + len(BEGIN)] + "\n\n" + block.strip() + "\n\n" + document[end:]

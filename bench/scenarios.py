"""What is compared with what: the scenarios, their systems and the ratios (with targets) between them.

Pure data. A scenario is one model; every system of it is fed the same generated events and measured by the
same method, one after the other, on the same broker.
"""

from __future__ import annotations

from service.tools.harness.systems import SERVICE, Ratio, Scenario, System

SERVICE_KNEE = "service-knee"
SERVICE_SWEPT = "service-swept"
SERVICE_STREAM = "service-stream"
SERVICE_EXACTLY_ONCE = "service-exactly-once"
SERVICE_SHARE = "service-share-group"
PLAIN = "plain"
"""A plain consume -> produce loop written for speed with confluent-kafka alone: the transport ceiling."""
PASSTHROUGH = "passthrough"
"""The same copy through the service's own transport pieces: what that bookkeeping costs, beside ``plain``."""
BATCH_LOOP = "batch-loop"
SERVICE_LOOP_SIZE = "service-loop-size"
LOOP_BATCH = 32
"""The batch-loop baseline's ``consume(n)``: what a user writes from a tutorial."""
NAIVE = "naive"
RAW_ORT = "raw-ort"
RAW_ORT_SORTED = "raw-ort-sorted"
BACKFILL = "backfill"
RAW_ORT_AT_BACKFILL = "raw-ort-at-backfill"
RAW_ORT_SORTED_AT_BACKFILL = "raw-ort-sorted-at-backfill"
SERVICE_JSON = "service-json-lines"
RECORDS_PER_REQUEST = 50
"""Log records per OTLP request in scenario C: the Collector's batch processor sends hundreds per request at
volume; 50 keeps a request within one fetch of a few partitions."""


def _service(hint: float, light: bool = False) -> System:
    """The defaults row. Its half-load latency runs go at half the rate of :func:`_stream`: what its stream
    regime sustains, the regime whose latency the target bounds (``MAX_WAIT_MS`` + 2 batches of
    ``MAX_SIZE``). Half its own drain rate would be half of the offline drain regime's throughput, a rate
    the stream sizes do not serve and at which the bound's batches are not the ones that run."""
    return System(
        SERVICE,
        "service, default settings",
        ("service", "run"),
        True,
        hint,
        defaults=True,
        light=light,
        load_of=SERVICE_STREAM,
    )


def _exactly_once(hint: float, light: bool = False) -> System:
    """The defaults with ``DELIVERY__GUARANTEE=exactly-once``, its half-load runs at the defaults row's
    rate. Its latency is timed when a read_committed reader sees each result (at its transaction's
    commit), the defaults row's when it was produced: the comparison leans against exactly-once by the
    reader's own delay."""
    return System(
        SERVICE_EXACTLY_ONCE,
        "service, exactly-once (default settings, MICROBATCH_DELIVERY__GUARANTEE=exactly-once)",
        ("service", "run"),
        True,
        hint,
        env=(("DELIVERY__GUARANTEE", "exactly-once"),),
        defaults=True,
        light=light,
        load_of=SERVICE_STREAM,
    )


def _share(hint: float) -> System:
    """The defaults reading through a share group (``KAFKA__GROUP_TYPE=share``): each record acknowledged
    on its own instead of an offset per partition. Drain only: what per-record acknowledgement costs."""
    return System(
        SERVICE_SHARE,
        "service, share group (default settings, MICROBATCH_KAFKA__GROUP_TYPE=share)",
        ("service", "run"),
        True,
        hint,
        env=(("KAFKA__GROUP_TYPE", "share"),),
        defaults=True,
        latency=False,
    )


def _stream(hint: float) -> System:
    """The defaults without the drain regime: the live capacity of the stream regime (batches of up to
    ``MAX_SIZE``)."""
    return System(
        SERVICE_STREAM,
        "service, default settings without the drain regime (the stream regime's capacity)",
        ("service", "run"),
        True,
        hint,
        defaults=True,
        latency=False,
        drain_regime=False,
    )


def _backfill(hint: float) -> System:
    """``microbatch backfill`` with the default batch settings, as a user runs it: it picks its own batch
    size (the knee it measures at warm-up) and exits once the range (the backlog there when it starts) is
    done. The runner names the job after the run's fresh topics, so each run is a new job. No latency
    run: an offline range has no latency target. ``hint``: the defaults row's, so that both drain a
    backlog of the same size."""
    return System(
        BACKFILL,
        "microbatch backfill, default settings (batches cut full at the knee it measured)",
        ("service", "backfill"),
        True,
        hint,
        defaults=True,
        latency=False,
        ends=True,
    )


def _raw_ort_at_backfill(name: str, label: str, *args: str) -> System:
    """Raw ONNX Runtime pinned at the batch size the backfill row used: its ceiling at that size."""
    argv = ("bench.baselines", RAW_ORT, *args)
    return System(name, label, argv, False, 0, latency=False, pin_to=BACKFILL)


def _baseline(
    name: str, label: str, kafka: bool, hint: float, *args: str, latency: bool = True, light: bool = False
) -> System:
    command = name if name != RAW_ORT_SORTED else RAW_ORT
    argv = ("bench.baselines", command, *args)
    return System(name, label, argv, kafka, hint, latency=latency, light=light)


SCENARIOS: dict[str, Scenario] = {
    "A": Scenario(
        key="A",
        title="transport-bound",
        model="metrics-anomaly",
        kind="metrics",
        systems=(
            _service(100_000, light=True),
            _stream(55_000),
            # The size pinned (no adaptation, no drain regime) at the knee the defaults row measured at its
            # warm-up, and at the whole-service knee of `microbatch sweep --pipeline` (the scenario's size).
            System(
                SERVICE_KNEE,
                "service, batch size pinned at the knee it measured",
                ("service", "run"),
                True,
                100_000,
                env=(("BATCH__ADAPTIVE", "false"),),
                latency=False,
                pin_to=SERVICE,
            ),
            _exactly_once(100_000, light=True),
            _share(100_000),
            System(
                SERVICE_SWEPT,
                "service, batch size pinned at the sweep's knee",
                ("service", "run"),
                True,
                70_000,
                env=(("BATCH__ADAPTIVE", "false"),),
                latency=False,
            ),
            # The ceiling, and the service's transport without the model beside it: the gap between the
            # two is what the service's bookkeeping costs.
            _baseline(PLAIN, "plain consume-produce loop (transport ceiling)", True, 120_000, light=True),
            _baseline(PASSTHROUGH, "service transport, no model", True, 120_000, light=True),
            _baseline(
                BATCH_LOOP,
                f"consume({LOOP_BATCH}) loop: one session.run, flush, commit per consume",
                True,
                30_000,
                "--consume-batch",
                str(LOOP_BATCH),
                latency=False,
                light=True,
            ),
            # The loop's batching in the service: batches of LOOP_BATCH, cut full or at the window, as
            # the loop's consume(LOOP_BATCH, window) returns. Beside the loop at light load it shows what the
            # service's own path costs per event at the same batch size; the defaults row cuts smaller
            # batches at that rate, for latency, and pays per batch for it.
            System(
                SERVICE_LOOP_SIZE,
                f"service, batches of {LOOP_BATCH} cut full or at the window (the loop's batching)",
                ("service", "run"),
                True,
                70_000,
                env=(
                    ("BATCH__MAX_SIZE", str(LOOP_BATCH)),
                    ("BATCH__ADAPTIVE", "false"),
                    ("BATCH__NATURAL", "false"),
                ),
                latency=False,
                light=True,
            ),
            _backfill(100_000),
            _baseline(NAIVE, "naive per-message loop", True, 1_000),
            _baseline(RAW_ORT, "raw ONNX Runtime, no Kafka", False, 0),
            _raw_ort_at_backfill(RAW_ORT_AT_BACKFILL, "raw ONNX Runtime at the backfill's batch size"),
        ),
        ratios=(
            Ratio(SERVICE, SERVICE_KNEE, 0.9),
            Ratio(SERVICE, SERVICE_STREAM),
            Ratio(SERVICE_KNEE, PLAIN, 0.8),
            Ratio(SERVICE, SERVICE_SWEPT),
            Ratio(SERVICE_SWEPT, PLAIN),
            Ratio(SERVICE, PLAIN, 0.8),
            Ratio(SERVICE_EXACTLY_ONCE, SERVICE, 0.8),
            Ratio(SERVICE_SHARE, SERVICE, 0.8),
            Ratio(PASSTHROUGH, PLAIN),
            Ratio(SERVICE, BATCH_LOOP),
            Ratio(SERVICE_LOOP_SIZE, BATCH_LOOP),
            Ratio(SERVICE, NAIVE, 5.0),
            Ratio(BACKFILL, SERVICE, 1.3),
            Ratio(BACKFILL, SERVICE_STREAM),
            Ratio(BACKFILL, RAW_ORT_AT_BACKFILL),
        ),
        # The whole-service knee of `microbatch sweep --pipeline` (docs/BENCHMARKS.md): the swept row's
        # size, and raw ONNX Runtime's batches. The defaults row keeps the service's own settings.
        max_batch_size=64,
    ),
    "B": Scenario(
        key="B",
        title="model-bound",
        model="log-classifier",
        kind="logs",
        systems=(
            _service(4_000),
            _stream(3_000),
            _exactly_once(4_000),
            _baseline(RAW_ORT, "raw ONNX Runtime, no Kafka (model ceiling)", False, 0),
            # The service groups items of similar length into a batch (less padding); batches sorted by
            # length are the best any batching can do at this size, so this is the stricter ceiling. Both
            # raw rows count the tokenisation the service must pay too (timed in the same process).
            _baseline(
                RAW_ORT_SORTED, "raw ONNX Runtime, batches sorted by length", False, 0, "--order", "length"
            ),
            _backfill(4_000),
            # The backfill buckets by length too (among more lines than the service), so the sorted
            # batches at its size are its honest ceiling.
            _raw_ort_at_backfill(
                RAW_ORT_SORTED_AT_BACKFILL,
                "raw ONNX Runtime, batches sorted by length, at the backfill's batch size",
                "--order",
                "length",
            ),
            _baseline(NAIVE, "naive per-message loop", True, 1_000),
        ),
        ratios=(
            Ratio(SERVICE, RAW_ORT_SORTED, 0.8),
            Ratio(SERVICE, RAW_ORT, 0.9),
            Ratio(SERVICE_EXACTLY_ONCE, SERVICE, 0.8),
            Ratio(SERVICE, SERVICE_STREAM),
            Ratio(SERVICE, NAIVE),
            Ratio(BACKFILL, RAW_ORT_SORTED_AT_BACKFILL, 0.9),
            Ratio(BACKFILL, SERVICE),
        ),
    ),
    "C": Scenario(
        key="C",
        title="fan-out (OTLP logs)",
        model="log-classifier",
        kind="otlp-logs",
        systems=(
            System(
                SERVICE,
                f"service, OTLP requests ({RECORDS_PER_REQUEST} records each, otlp-proto)",
                ("service", "run"),
                True,
                4_000,
                env=(("INPUT__FORMAT", "otlp-proto"),),
                items_per_message=RECORDS_PER_REQUEST,
            ),
            # The same records one per message, as JSON lines: scenario B's service, in the same run.
            System(
                SERVICE_JSON,
                "service, the same records as JSON lines",
                ("service", "run"),
                True,
                4_000,
                "logs",
            ),
            System(
                RAW_ORT,
                "raw ONNX Runtime, no Kafka (model ceiling)",
                ("bench.baselines", RAW_ORT),
                False,
                0,
                "logs",
            ),
        ),
        ratios=(Ratio(SERVICE, SERVICE_JSON), Ratio(SERVICE, RAW_ORT)),
    ),
}


def selected(choice: str) -> list[Scenario]:
    """``A``, ``B``, ``C`` or ``all``."""
    return list(SCENARIOS.values()) if choice == "all" else [SCENARIOS[choice]]

"""Hand-written fakes for the unit tier: a clock that moves only when told, and the source, sink and engine
the loop drives (behind ``service.flow.ports``), each keeping a record of what was asked of it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import numpy as np

from service.errors import TransactionAborted
from service.flow.records import Ack, InputRecord, OutRecord, TopicPartition

Coords = tuple[str, int, int]


def coords(record: InputRecord) -> Coords:
    return (record.topic, record.partition, record.offset)


class FakeClock:
    """A monotonic clock that only moves when a test says so. Call it to read it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "a monotonic clock never goes back"
        self.now += seconds


# -- the script a FakeSource plays --------------------------------------------------------------------------


@dataclass
class At:
    """Records that arrive at clock time ``t``: a consume whose timeout ends earlier returns nothing."""

    t: float
    records: list[InputRecord]


@dataclass
class Revoke:
    tps: list[TopicPartition]


@dataclass
class Assign:
    tps: list[TopicPartition]


@dataclass
class Lost:
    tps: list[TopicPartition]


@dataclass
class Do:
    action: Callable[[], None]


# -- fakes ------------------------------------------------------------------------------------------------


class FakeSource:
    """Plays a script, one step per consume call (a list of records may take several):

    - a list of records is available now: consume returns up to ``max_messages`` of them at once (it does
      not wait for more, so a batch it leaves open stays open until the clock moves);
    - ``At(t, records)``: nothing arrives before ``t``, so a consume whose timeout ends earlier advances the
      fake clock by that timeout and returns nothing;
    - ``Revoke``/``Assign``/``Lost`` call the listener from inside consume, as librdkafka does; ``Do`` runs
      an action.

    Returned records are stamped ``received`` = now. When the script is exhausted it calls
    ``on_exhausted`` (the pipeline's stop)."""

    def __init__(self, script: list, clock, events: list, *, greedy: bool = False) -> None:
        self.script = deque(script)
        self.clock = clock
        self.events = events
        self.greedy = greedy
        self.listener = None
        self.on_exhausted: Callable[[], None] = lambda: None
        self.consume_calls: list[tuple[int, float]] = []
        self.stored: list[dict[TopicPartition, int]] = []
        self.commit_ok = True

    def subscribe(self, topics: list[str], listener) -> None:
        self.events.append(("subscribe", tuple(topics)))
        self.listener = listener

    def consume(self, max_messages: int, timeout_s: float) -> list[InputRecord]:
        self.consume_calls.append((max_messages, timeout_s))
        assert len(self.consume_calls) < 10_000, "the pipeline loops without making progress"
        assert max_messages >= 1
        assert timeout_s >= 0
        if not self.script:
            self.on_exhausted()
            return []
        step = self.script[0]
        if isinstance(step, At):
            if self.clock.now + timeout_s < step.t:
                self.clock.advance(timeout_s)
                return []
            self.clock.now = max(self.clock.now, step.t)
            self.script[0] = step = list(step.records)
        if isinstance(step, list):
            count = len(step) if self.greedy else max_messages
            taken, rest = step[:count], step[count:]
            if rest:
                self.script[0] = rest
            else:
                self.script.popleft()
            self.events.append(("consumed", [coords(r) for r in taken]))
            return [msgspec.structs.replace(r, received=self.clock.now) for r in taken]
        self.script.popleft()
        if isinstance(step, Revoke):
            self.events.append(("revoke_start", step.tps))
            self.listener.on_revoked(step.tps)
            self.events.append(("revoke_end", step.tps))
        elif isinstance(step, Assign):
            self.listener.on_assigned(step.tps)
        elif isinstance(step, Lost):
            self.events.append(("lost_start", step.tps))
            self.listener.on_lost(step.tps)
            self.events.append(("lost_end", step.tps))
        elif isinstance(step, Do):
            step.action()
        else:
            raise AssertionError(f"unknown script step {step!r}")
        return []

    def lag(self) -> dict[TopicPartition, int]:
        """Records available now (the head of the script, when it is a list), like librdkafka's
        prefetched-but-not-consumed count, per partition."""
        head = self.script[0] if self.script else None
        lag: dict[TopicPartition, int] = {}
        for record in head if isinstance(head, list) else []:
            lag[record.tp] = lag.get(record.tp, 0) + 1
        return lag

    def store(self, offsets: dict[TopicPartition, int]) -> None:
        self.events.append(("store", dict(offsets)))
        self.stored.append(dict(offsets))

    def rewind(self, offsets: dict[TopicPartition, int]) -> None:
        """Records the seek; a script step after it plays what is read again."""
        self.events.append(("rewind", dict(offsets)))

    def commit(self) -> bool:
        self.events.append(("commit",))
        return self.commit_ok

    def pause(self) -> None:
        self.events.append(("pause",))

    def resume(self, tps=None) -> None:
        self.events.append(("resume",) if tps is None else ("resume_partitions", tuple(tps)))

    def close(self) -> None:
        self.events.append(("close",))


class FakeShareSource(FakeSource):
    """A :class:`FakeSource` read through a share group: ``acknowledge`` records each answer (``accepted``,
    ``released``, ``rejected``: coordinates, in order)."""

    def __init__(self, script: list, clock, events: list, **kwargs) -> None:
        super().__init__(script, clock, events, **kwargs)
        self.answered: dict[Ack, list[tuple[str, int, int]]] = {ack: [] for ack in Ack}

    def acknowledge(self, records, ack: Ack) -> int:
        coordinates = [coords(r) for r in records]
        self.events.append((str(ack), coordinates))
        self.answered[ack] += coordinates
        return len(coordinates)

    def held(self) -> int:
        return 0


class FakeSink:
    """Keeps what was sent; poll/flush acknowledge according to a policy:

    - ``poll_acks``/``flush_acks``: whether poll / flush acknowledge anything at all;
    - ``reverse``: acknowledge in the reverse of send order (out of order);
    - ``withheld``: source coordinates whose outputs poll never acknowledges; flush does if
      ``flush_releases_withheld`` (a slow delivery), or only after :meth:`release`.
    """

    def __init__(
        self,
        events: list,
        *,
        poll_acks: bool = True,
        flush_acks: bool = True,
        reverse: bool = False,
        withheld: set[Coords] | None = None,
        flush_releases_withheld: bool = True,
    ) -> None:
        self.events = events
        self.poll_acks = poll_acks
        self.flush_acks = flush_acks
        self.reverse = reverse
        self.withheld = set(withheld or ())
        self.flush_releases_withheld = flush_releases_withheld
        self.sent: list[OutRecord] = []
        self.unacked: list[OutRecord] = []
        self.refused: list[tuple[OutRecord, str]] = []

    def send(self, out: OutRecord) -> None:
        self.events.append(("send", out.topic, coords(out.source)))
        self.sent.append(out)
        self.unacked.append(out)

    def send_all(self, outs: list[OutRecord]) -> None:
        for out in outs:
            self.send(out)

    def poll(self, timeout_s: float = 0.0) -> list[InputRecord]:
        assert timeout_s == 0, "the loop must not block in poll"
        return self._ack(flushing=False) if self.poll_acks else []

    def flush(self, timeout_s: float) -> list[InputRecord]:
        self.events.append(("flush",))
        return self._ack(flushing=True) if self.flush_acks else []

    def pending(self) -> int:
        return len(self.unacked)

    def take_refused(self) -> list:
        refused, self.refused = self.refused, []
        return refused

    def release(self) -> None:
        self.withheld.clear()

    def _ack(self, flushing: bool) -> list[InputRecord]:
        release_all = flushing and self.flush_releases_withheld
        ready = [o for o in self.unacked if release_all or coords(o.source) not in self.withheld]
        ready_ids = {id(o) for o in ready}
        self.unacked = [o for o in self.unacked if id(o) not in ready_ids]
        if self.reverse:
            ready.reverse()
        for out in ready:
            self.events.append(("ack", coords(out.source)))
        return [record for o in ready for record in (o.source, *o.also)]

    def outputs(self, topic: str) -> list[OutRecord]:
        return [o for o in self.sent if o.topic == topic]


class FakeTransactionalSink(FakeSink):
    """A :class:`FakeSink` whose outputs go into transactions, on ``clock``: one opens with the first send
    after the last commit or abort. ``fail_with``: the open transaction's deliveries failed (it can only
    abort; so it does with an output not acknowledged at the commit); ``abort_commits``: how many
    commits the broker answers with an abortable error."""

    def __init__(self, events: list, clock, **policy) -> None:
        super().__init__(events, **policy)
        self.clock = clock
        self.since: float | None = None
        self.first = 0.0
        self.count = 0
        self.fail_with: str | None = None
        self.abort_commits = 0
        self.committed: list[dict[TopicPartition, int]] = []
        self.visible: list[OutRecord] = []  # what a read_committed reader sees
        self._open: list[OutRecord] = []

    def send(self, out: OutRecord) -> None:
        if self.since is None:
            self.since, self.first = self.clock(), out.source.received
        self.count += 1
        self._open.append(out)
        super().send(out)

    def opened(self) -> float | None:
        return self.since

    def oldest(self) -> float:
        return self.first

    def records(self) -> int:
        return self.count

    def failing(self) -> str | None:
        return self.fail_with

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.fail_with is None and self.unacked:
            self.fail_with = "outputs not acknowledged"
        if self.fail_with is not None or self.abort_commits:
            self.abort_commits = max(0, self.abort_commits - 1)
            why = self.fail_with or "abortable"
            self.abort()
            raise TransactionAborted(why)
        self.events.append(("txn_commit", dict(offsets)))
        self.committed.append(dict(offsets))
        self.visible += self._open
        self._end()

    def abort(self) -> None:
        self.events.append(("txn_abort",))
        self.unacked = []
        self._end()

    def _end(self) -> None:
        self.since, self.count, self.fail_with, self._open = None, 0, None, []


def _cuda_out_of_memory(rows: int) -> Exception:
    return RuntimeError(f"CUDA out of memory for a batch of {rows}")


def onnxruntime_oom(rows: int) -> Exception:
    """The error ONNX Runtime's CUDA arena raises when a run does not fit in device memory: its own
    exception type, with the text it writes (onnxruntime/core/framework/bfc_arena.cc)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    return RuntimeException(
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Gemm node. "
        "Name:'/net/net.0/Gemm' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 "
        "void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
        "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size "
        f"{rows * 2**28}"
    )


class FakeEngine:
    """score = 2a + b per row. Raises for any batch holding a row whose ``a`` is in ``poison`` (a bad item),
    or for any batch larger than ``max_batch`` (like running out of GPU memory)."""

    def __init__(
        self,
        *,
        poison: set[float] | None = None,
        max_batch: int | None = None,
        extra_rows: int = 0,
        out_of_memory: Callable[[int], Exception] | None = None,
    ) -> None:
        """``out_of_memory(rows)``: the error a batch over ``max_batch`` raises (a RuntimeError naming
        CUDA by default; ``onnxruntime_oom`` for ONNX Runtime's own)."""
        self.poison = poison or set()
        self.max_batch = max_batch
        self.extra_rows = extra_rows
        self.out_of_memory = out_of_memory or (
            lambda rows: RuntimeError(f"CUDA out of memory for a batch of {rows}")
        )
        self.calls: list[np.ndarray] = []

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        (x,) = feeds.values()
        self.calls.append(x.copy())
        if self.max_batch is not None and len(x) > self.max_batch:
            raise self.out_of_memory(len(x))
        if any(a in self.poison for a in x[:, 0].tolist()):
            raise RuntimeError("cannot score this row")
        score = 2 * x[:, 0] + x[:, 1]
        if self.extra_rows:
            score = np.concatenate([score, np.zeros(self.extra_rows, dtype=score.dtype)])
        return {"score": score}

    def batch_sizes(self) -> list[int]:
        return [len(x) for x in self.calls]

"""service/engine/drain.py: the drain ceiling from a model's measured curve, its caps and the setting.

A fake engine whose batch costs a fixed overhead plus a per-item cost on a fake clock, and a fake memory
reading, so every rule is checked on known numbers."""

from __future__ import annotations

from service.config import load_settings
from service.engine.drain import LIMIT, drain_ceiling, offline_size
from service.engine.memory import MemoryLimit, host_limit, peak_rss
from service.flow.model import Model, ModelRef

MiB = 2**20


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Engine:
    """A batch of n items costs ``fixed + n * per_item`` seconds on the clock; memory grows per item."""

    def __init__(self, clock: Clock, fixed: float, per_item: float) -> None:
        self.clock, self.fixed, self.per_item = clock, fixed, per_item
        self.largest = 0
        self.sizes: list[int] = []

    def run(self, feeds):
        n = len(feeds["x"])
        self.sizes.append(n)
        self.largest = max(self.largest, n)
        self.clock.now += self.fixed + n * self.per_item
        return {"y": feeds["x"]}


class Processor:
    def sample(self):
        return 1

    def preprocess(self, items):
        return {"x": list(items)}

    def postprocess(self, outputs, items):
        return [{"y": y} for y in outputs["y"]]


class Text(Processor):
    """A processor with a cost, like ``text``: every item is ``tokens`` long."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def cost(self, _item) -> int:
        return self.tokens


def model(engine: Engine, processor=None) -> Model:
    return Model.of(engine, processor or Processor(), ModelRef("m", "1", "CPUExecutionProvider"))  # type: ignore[arg-type]


def batch(**values):
    return load_settings(batch=values).batch


def no_memory():
    return None


def test_the_knee_of_the_measured_curve_is_the_ceiling():
    clock = Clock()
    # 1 ms per call plus 100 us per item: 6,154 items/s at 16, 7,619 at 32, 8,649 at 64, 9,275 at 128: the
    # gain per doubling falls below 10% where the per-item cost dominates.
    engine = Engine(clock, fixed=0.001, per_item=0.0001)
    ceiling = drain_ceiling(model(engine), batch(), clock, no_memory)
    rates = dict(ceiling.measured)
    assert list(rates) == [16, 32, 64, 128, 256, 512]
    assert ceiling.source == "knee"
    assert ceiling.size == 64  # 64 -> 128 gains 7%: the first size no larger one beats by 10% a doubling
    assert rates[128] < rates[64] * 1.1 and rates[64] > rates[32] * 1.1
    assert 16 in engine.sizes and 512 in engine.sizes  # every size measured was warmed up too


def test_without_a_knee_the_ceiling_is_the_largest_size_measured():
    clock = Clock()
    ceiling = drain_ceiling(model(Engine(clock, fixed=0.01, per_item=0.0)), batch(), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (LIMIT, "no_knee")


def test_a_size_over_the_slo_budget_ends_the_measurement_and_is_not_the_ceiling():
    clock = Clock()
    # Budget (250 - 50) / 2 = 100 ms; 1 ms per item: 64 takes 64 ms, 128 takes 128 ms.
    ceiling = drain_ceiling(model(Engine(clock, fixed=0.0, per_item=0.001)), batch(), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (64, "budget")
    assert max(size for size, _ in ceiling.measured) == 64


def test_memory_caps_the_ceiling_under_70_percent_of_the_limit():
    clock = Clock()
    engine = Engine(clock, fixed=0.01, per_item=0.0)  # no knee: it would be 512

    def memory():
        # 100 MiB at rest, 1 MiB per item of the largest batch so far, against a 400 MiB limit: 70% is
        # 280 MiB, so 128 (228 MiB) fits and 256 (356 MiB) does not.
        return MemoryLimit(400 * MiB, "cgroup"), lambda: (100 + engine.largest) * MiB

    ceiling = drain_ceiling(model(engine), batch(), clock, memory)
    assert (ceiling.size, ceiling.source) == (128, "memory")
    assert ceiling.describe()["memory_limit"] == "cgroup 0.4 GiB"


def test_memory_never_caps_below_max_size():
    clock = Clock()
    engine = Engine(clock, fixed=0.01, per_item=0.0)
    ceiling = drain_ceiling(model(engine), batch(), clock, lambda: (MemoryLimit(MiB, "ram"), lambda: 2 * MiB))
    assert ceiling.size == 16


def test_the_setting_is_the_ceiling_and_only_sizes_up_to_it_are_measured():
    clock = Clock()
    engine = Engine(clock, fixed=0.01, per_item=0.0)
    ceiling = drain_ceiling(model(engine), batch(drain_max_size=100), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (100, "setting")
    assert [size for size, _ in ceiling.measured] == [16, 32, 64, 100]


def test_the_setting_is_still_held_to_the_budget():
    clock = Clock()
    engine = Engine(clock, fixed=0.0, per_item=0.001)
    ceiling = drain_ceiling(model(engine), batch(drain_max_size=400), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (64, "budget")


def test_text_sizes_stop_at_the_token_cap():
    clock = Clock()
    engine = Engine(clock, fixed=0.01, per_item=0.0)
    # 8,192 tokens of 64-token lines: 128 lines at most; 256 would never be cut.
    ceiling = drain_ceiling(model(engine, Text(64)), batch(), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (128, "tokens")
    assert engine.largest == 128


def test_no_drain_when_the_size_is_not_adaptive():
    clock = Clock()
    engine = Engine(clock, fixed=0.01, per_item=0.0)
    ceiling = drain_ceiling(model(engine), batch(adaptive=False), clock, no_memory)
    assert (ceiling.size, ceiling.source) == (16, "max_size")
    assert engine.sizes == []


def test_the_host_limit_is_the_cgroups_else_the_ram(tmp_path):
    limited, unlimited = tmp_path / "limited", tmp_path / "unlimited"
    limited.write_text("536870912\n")
    unlimited.write_text("max\n")
    assert host_limit((tmp_path / "missing", limited)) == MemoryLimit(512 * MiB, "cgroup")
    ram = host_limit((unlimited,))
    assert ram.source == "ram"
    assert ram.total > 0
    assert peak_rss() > 0


def test_offline_size_is_the_knee_without_a_latency_budget():
    clock = Clock()
    # 50 ms per call: past the streaming budget at every size, so streaming stops measuring at once.
    engine = Engine(clock, fixed=0.05, per_item=0.0001)
    streaming = drain_ceiling(model(engine), batch(), clock, no_memory)
    assert streaming.source == "budget"
    offline = offline_size(model(engine), batch(), clock=clock, memory=no_memory)
    assert offline.source in ("knee", "no_knee")
    assert offline.size > streaming.size
    assert offline.measured[0][0] == 16


def test_offline_size_is_max_size_when_set_still_capped_by_memory():
    clock = Clock()
    engine = Engine(clock, fixed=0.001, per_item=0.0001)
    assert offline_size(model(engine), batch(max_size=100), clock=clock, memory=no_memory).size == 100
    limit = MemoryLimit(1000 * MiB, "cgroup")
    used = lambda: engine.largest * 10 * MiB  # noqa: E731  (100 items: 1000 MiB, over 70%)
    capped = offline_size(model(engine), batch(max_size=100), clock=clock, memory=lambda: (limit, used))
    assert capped.source == "memory" and capped.size < 100

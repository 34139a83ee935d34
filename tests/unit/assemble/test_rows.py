"""service/assemble/rows.py: points -> rows per key and interval, on a fake clock."""

from __future__ import annotations

import pytest

from service.assemble import Assembler, rules_for

FEATURES = ["system.cpu.utilization.user", "system.memory.utilization", "system.network.io.receive"]
CPU, MEM, NET = FEATURES


def cpu(value, *, host="h", time=100.0):
    return point("system.cpu.utilization", value, {"cpu": "total", "cpu.mode": "user"}, host=host, time=time)


def mem(value, *, host="h", time=100.0):
    return point("system.memory.utilization", value, {"system.memory.state": "used"}, host=host, time=time)


def net(value, *, host="h", time=100.0, kind="rate", interface="eth0"):
    attrs = {"network.interface.name": interface, "network.io.direction": "receive"}
    return point("system.network.io", value, attrs, host=host, time=time, kind=kind)


def point(metric, value, attributes, *, host="h", time=100.0, kind="gauge"):
    p = {"metric": metric, "attributes": attributes, "time": time, "value": value, "kind": kind}
    if host is not None:
        p["host"] = host
    return p


@pytest.fixture
def make(clock):
    def build(**kw):
        args = {
            "key": ("host",),
            "interval_s": 10.0,
            "max_wait_s": 15.0,
            "grace_s": 0.2,
            "fill": "typical",
            "typical": {NET: 1234.0},
            "clock": clock,
        } | kw
        required = args.pop("required", [CPU, MEM])
        return Assembler(rules_for(FEATURES), required, **args)

    return build


def test_a_complete_row_closes_after_the_grace_with_every_message_that_fed_it_once(make, clock):
    rows = make()
    assert rows.add("m1", [cpu(0.25)]).rows == 1
    assert rows.add("m2", [mem(0.5, time=100.004), mem(0.5, time=100.004)]).rows == 1
    fed = rows.add("m3", [net(300.0, time=99.998)])
    assert (fed.rows, fed.used) == (1, 1)
    assert rows.due() == []
    clock.advance(0.2)
    (row,) = rows.due()
    assert row.scored and row.key == "h" and row.time == 100.0 and row.interval_s == 10.0
    assert row.values == {CPU: 0.25, MEM: 0.5, NET: 300.0}
    assert row.filled == () and row.sources == ("m1", "m2", "m3")
    assert len(rows) == 0


def test_points_in_the_grace_still_join_a_complete_row(make, clock):
    rows = make()
    rows.add("m1", [cpu(0.1), mem(0.2), net(100.0)])
    clock.advance(0.1)
    rows.add("m2", [net(50.0, interface="eth1")])
    clock.advance(0.1)
    (row,) = rows.due()
    assert row.values[NET] == 150.0 and row.sources == ("m1", "m2")


def test_a_row_short_of_an_optional_feature_is_scored_at_max_wait_with_it_filled(make, clock):
    rows = make()
    rows.add("m1", [cpu(0.1), mem(0.2)])
    clock.advance(14.9)
    assert rows.due() == []
    clock.advance(0.1)
    (row,) = rows.due()
    assert row.scored and row.values[NET] == 1234.0 and row.filled == (NET,)


def test_a_row_short_of_a_required_feature_closes_incomplete(make, clock):
    rows = make()
    rows.add("m1", [cpu(0.1), net(5.0)])
    clock.advance(15.0)
    (row,) = rows.due()
    assert not row.scored and row.missing == (MEM,) and row.sources == ("m1",)
    assert row.values == {CPU: 0.1, NET: 5.0}


def test_fill_last_takes_the_hosts_last_value_then_the_typical_one(make, clock):
    rows = make(fill="last")
    rows.add("a", [cpu(0.1), mem(0.2), net(77.0)])
    rows.add("b", [cpu(0.1, host="other"), mem(0.2, host="other")])
    clock.advance(0.2)
    rows.due()
    rows.add("c", [cpu(0.1, time=110.0), mem(0.2, time=110.0)])
    rows.add("d", [cpu(0.1, host="other", time=110.0), mem(0.2, host="other", time=110.0)])
    clock.advance(15.0)
    by_key = {row.key: row for row in rows.due()}
    assert by_key["h"].values[NET] == 77.0
    assert by_key["other"].values[NET] == 1234.0  # never seen: the typical value


def test_fill_zero_and_a_fill_without_a_value_leaves_the_row_incomplete(make, clock):
    rows = make(fill="zero")
    rows.add("a", [cpu(0.1), mem(0.2)])
    clock.advance(15.0)
    assert rows.due()[0].values[NET] == 0.0
    rows = make(fill="typical", typical={})
    rows.add("a", [cpu(0.1), mem(0.2)])
    clock.advance(15.0)
    (row,) = rows.due()
    assert row.missing == (NET,)


def test_a_point_for_a_closed_row_is_late_and_feeds_nothing(make, clock):
    rows = make()
    rows.add("m1", [cpu(0.1), mem(0.2), net(1.0)])
    clock.advance(0.2)
    rows.due()
    fed = rows.add("m2", [net(2.0, interface="eth1"), cpu(0.3, time=90.0)])
    assert (fed.rows, fed.late, fed.used) == (0, 2, 0)
    assert rows.add("m3", [cpu(0.3, time=110.0)]).rows == 1  # the next interval opens


def test_points_no_feature_reads_are_ignored_and_empty_ones_counted(make):
    rows = make()
    fed = rows.add(
        "m",
        [
            point("collectd.entropy.entropy", 3000.0, {}),
            point("system.cpu.utilization", 0.5, {"cpu": "0", "cpu.mode": "system"}),  # not user
            net(5.0, interface="lo"),  # loopback: excluded
            cpu(None),
            cpu(float("nan")),
            {"metric": "system.cpu.utilization", "attributes": {"cpu.mode": "user"}, "value": 1.0},  # no time
        ],
    )
    assert (fed.rows, fed.used, fed.ignored, fed.empty) == (0, 0, 4, 2)
    assert len(rows) == 0


def test_counters_become_rates_over_consecutive_samples(make, clock):
    rows = make(required=[CPU, MEM, NET])
    rows.add("m1", [cpu(0.1), mem(0.2), net(1000.0, kind="counter")])
    fed = rows.add(
        "m2", [cpu(0.1, time=110.0), mem(0.2, time=110.0), net(3000.0, time=110.0, kind="counter")]
    )
    assert fed.empty == 0 and fed.used == 3
    clock.advance(15.0)
    first, second = sorted(rows.due(), key=lambda r: r.time)
    assert first.missing == (NET,)  # the first sample of a counter has no rate
    assert second.values[NET] == 200.0


def test_one_message_may_feed_rows_of_several_keys(make):
    rows = make()
    fed = rows.add("req", [cpu(0.1, host="a"), cpu(0.2, host="b"), mem(0.3, host="a")])
    assert fed.rows == 2 and len(rows) == 2


def test_a_point_without_a_key_takes_the_messages_or_is_unkeyed(make, clock):
    rows = make()
    fed = rows.add("m1", [cpu(0.1, host=None), mem(0.2, host="h")])
    assert (
        fed.unkeyed
        == [
            (0, "no key: the point has no 'host'"),
        ]
        and fed.rows == 1
    )
    fed = rows.add("m2", [cpu(0.1, host=None)], fallback_key="h")
    assert fed.rows == 1 and fed.unkeyed == []
    clock.advance(15.0)
    (row,) = rows.due()
    assert row.key == "h" and row.sources == ("m1", "m2")


def test_the_key_is_a_path_into_the_point(make, clock):
    rows = make(key=("resource", "service.instance.id"))
    p = cpu(0.1, host=None) | {"resource": {"service.instance.id": "i-1"}}
    assert rows.add("m", [p]).rows == 1
    clock.advance(15.0)
    assert rows.due()[0].key == "i-1"


def test_discard_takes_messages_and_their_points_out_of_open_rows(make, clock):
    rows = make()
    rows.add(("p0", 1), [cpu(0.1, host="a"), mem(0.1, host="a")])
    rows.add(("p1", 1), [net(5.0, host="a")])  # completes a's row
    rows.add(("p0", 2), [cpu(0.1, host="b")])
    assert rows.discard(lambda m: m[0] == "p1") == 1
    assert len(rows) == 2
    clock.advance(0.2)
    assert rows.due() == []  # a is short of its network again: it waits for max_wait
    assert rows.discard(lambda m: m == ("p0", 2)) == 1
    assert len(rows) == 1  # b had nothing else: gone
    clock.advance(15.0)
    (row,) = rows.due()
    assert row.key == "a" and row.sources == (("p0", 1),) and row.filled == (NET,)


def test_required_features_must_be_features(make):
    with pytest.raises(ValueError, match=r"system\.disk\.io\.read"):
        make(required=["system.disk.io.read"])

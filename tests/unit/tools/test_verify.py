"""service/tools/verify.py: what answers what (the parts that need no broker)."""

from __future__ import annotations

from service.flow.records import InputRecord
from service.formats import load_format
from service.tools.verify import _items, _row_inputs


def test_a_rows_result_answers_each_message_it_lists_of_the_input_topic():
    value = {
        "row": {
            "inputs": {"count": 4, "offsets": {"collectd[0]": [3, 9], "collectd[2]": [1], "other[0]": [5]}}
        }
    }
    assert _row_inputs(value, "collectd") == [(0, 3, None), (0, 9, None), (2, 1, None)]
    assert _row_inputs({"source": {"topic": "collectd", "partition": 0, "offset": 3}}, "collectd") is None
    assert _row_inputs(None, "collectd") is None


def test_an_input_of_a_metrics_format_needs_one_answer_whatever_its_points():
    record = InputRecord("t", 0, 0, None, b'{"resourceLogs": []}', None, None, 0.0)
    lines = InputRecord(
        "t", 0, 1, None, b"cpu,host=a usage_user=1 1\nmem,host=a used_percent=2 1", None, None, 0.0
    )
    assert _items(lines, load_format("influx")) == 1
    assert _items(record, load_format("otlp-json", metrics=True)) == 1

"""Metrics and probes of the real service on the real broker: scraped over HTTP during a run, the values
move as the traffic does."""

from __future__ import annotations

import msgspec

from service.engine.drain import LIMIT as DRAIN_LIMIT
from service.engine.session import Engine
from service.models.reference import MODELS_DIR
from tests.support.harness import (
    SERVICE_PARTITIONS,
    free_port,
    http_get,
    metrics_events,
    produce,
    read_topic,
    scrape,
    start_on_topics,
    wait_for,
)

PARTITIONS = SERVICE_PARTITIONS
REFERENCE_FEATURES = msgspec.json.decode(
    Engine(MODELS_DIR / "metrics-anomaly.onnx", ["CPUExecutionProvider"]).metadata["microbatch.features"]
)


def test_metrics_and_probes_follow_a_real_run(tmp_path, kafka_bootstrap, topics, group_id):
    port = free_port()
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, metrics__port=port)
    try:
        # Live from the start; ready once the model is warm and the loop runs (partitions or not).
        wait_for(lambda: http_get(port, "/healthz")[0] == 200, 60, "/healthz answering")
        wait_for(lambda: http_get(port, "/readyz")[0] == 200, 90, "/readyz 200")
        before = scrape(port)
        assert before["microbatch_ready"] == 1
        assert before["microbatch_events_consumed_total"] == 0
        assert (
            before[
                'microbatch_model_info{name="metrics-anomaly",provider="CPUExecutionProvider",version="1"}'
            ]
            == 1
        )

        good = metrics_events(600, seed=41)
        produce(kafka_bootstrap, topics["in"], [*good[:300], (b"bad", b"{not json"), *good[300:]])
        read_topic(kafka_bootstrap, topics["out"], expected=len(good))
        read_topic(kafka_bootstrap, topics["dlq"], expected=1)

        def caught_up() -> bool:
            m = scrape(port)
            return (
                m["microbatch_outputs_acknowledged_total"] == 601 and m["microbatch_assigned_partitions"] == 4
            )

        wait_for(caught_up, 30, "every output acknowledged and the state gauges published")
        after = scrape(port)
        assert after["microbatch_events_consumed_total"] == 601
        assert after["microbatch_results_produced_total"] == 600
        assert after['microbatch_dead_letters_total{reason="invalid_json"}'] == 1
        assert after["microbatch_end_to_end_latency_seconds_count"] == 600
        assert after["microbatch_batch_size_sum"] == 600
        assert 1 <= after["microbatch_batch_size_count"] <= 600
        assert after["microbatch_inference_seconds_count"] >= 1
        assert after["microbatch_queue_wait_seconds_count"] == after["microbatch_batch_size_count"]
        # A burst of 601 may stretch the target past MAX_SIZE (16), up to the drain ceiling measured at
        # warm-up; it drops back only at the next batch the window cuts, and none follows the burst here.
        assert 4 <= after["microbatch_batch_target_size"] <= DRAIN_LIMIT
        lags = {k: v for k, v in after.items() if k.startswith("microbatch_consumer_lag{")}
        assert len(lags) == PARTITIONS and all(v >= 0 for v in lags.values())
        assert after["microbatch_paused_partitions"] == 0

        # More traffic: the counters move by exactly that much.
        produce(kafka_bootstrap, topics["in"], metrics_events(200, seed=42))
        wait_for(lambda: scrape(port)["microbatch_results_produced_total"] == 800, 60, "200 more results")
        assert scrape(port)["microbatch_events_consumed_total"] == 801
        assert http_get(port, "/healthz") == (200, "ok\n")
        assert http_get(port, "/nope")[0] == 404
    finally:
        code = service.stop()
    assert code == 0, service.log()
    # Stopped: the port is closed with the process.
    assert http_get(port, "/healthz", timeout=1)[0] == 0


def test_a_misspelt_feature_is_one_loud_error_naming_the_closest_field_and_a_metric(
    tmp_path, kafka_bootstrap, topics, group_id
):
    port = free_port()
    features = [f if f != "cpu_pct" else "cpu_pcnt" for f in REFERENCE_FEATURES]
    service = start_on_topics(
        tmp_path, kafka_bootstrap, topics, group_id, metrics__port=port, model__features=",".join(features)
    )
    try:
        produce(kafka_bootstrap, topics["in"], metrics_events(150, seed=43))
        read_topic(kafka_bootstrap, topics["dlq"], expected=150)  # each still a dead letter, as it was
        wait_for(
            lambda: scrape(port).get('microbatch_fields_never_seen_total{field="cpu_pcnt"}') == 1,
            30,
            "the field counted",
        )
    finally:
        code = service.stop()
    assert code == 0, service.log()
    errors = [line for line in service.log().splitlines() if "field_never_seen" in line]
    assert len(errors) == 1, errors
    assert "cpu_pcnt" in errors[0] and "cpu_pct" in errors[0]

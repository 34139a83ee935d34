"""service/config/: MICROBATCH_* variables, the exact name in each ConfigError, secrets kept out of logs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from service.config import BatchSettings, Settings, load_settings, require_topics, sections
from service.errors import ConfigError
from service.formats import FORMATS
from service.models import reference

SECRET = "s3cr3t-pa55word-do-not-log"


def test_defaults_form_a_coherent_configuration():
    settings = load_settings()
    assert settings.input.topics == []
    assert settings.batch.min_size <= settings.batch.max_size
    assert settings.batch.max_wait_ms > 0
    assert settings.output.topic != settings.dlq.topic
    assert settings.model.name is None
    assert settings.model.path is None
    # The GPU first, the CPU as the fallback.
    assert settings.model.providers == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert settings.kafka.sasl_password is None
    assert settings.kafka.extra == {}


def test_env_names_use_the_prefix_and_double_underscore(monkeypatch):
    monkeypatch.setenv("MICROBATCH_BATCH__MAX_SIZE", "64")
    monkeypatch.setenv("MICROBATCH_BATCH__MIN_SIZE", "8")
    monkeypatch.setenv("MICROBATCH_BATCH__MAX_WAIT_MS", "12.5")
    monkeypatch.setenv("MICROBATCH_KAFKA__BOOTSTRAP_SERVERS", "broker-1:9093")
    monkeypatch.setenv("MICROBATCH_OUTPUT__TOPIC", "scored")
    monkeypatch.setenv("MICROBATCH_LOG__LEVEL", "debug")
    settings = load_settings()
    assert (settings.batch.min_size, settings.batch.max_size, settings.batch.max_wait_ms) == (8, 64, 12.5)
    assert settings.kafka.bootstrap_servers == "broker-1:9093"
    assert settings.output.topic == "scored"
    assert settings.log.level == "debug"


def test_variables_without_the_prefix_are_ignored(monkeypatch):
    monkeypatch.setenv("BATCH__MAX_SIZE", "99")
    monkeypatch.setenv("OTHERAPP_BATCH__MAX_SIZE", "99")
    assert load_settings().batch.max_size != 99


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("logs", ["logs"]),
        ("logs,metrics", ["logs", "metrics"]),
        (" logs , metrics,, audit.v2 ", ["logs", "metrics", "audit.v2"]),
        ('["logs", "metrics"]', ["logs", "metrics"]),
        ('  ["a-1", "b_2"]', ["a-1", "b_2"]),
    ],
)
def test_input_topics_accept_comma_lists_and_json_lists(monkeypatch, raw, expected):
    monkeypatch.setenv("MICROBATCH_INPUT__TOPICS", raw)
    assert load_settings().input.topics == expected


def test_model_lists_accept_comma_lists(monkeypatch):
    monkeypatch.setenv("MICROBATCH_MODEL__FEATURES", "cpu.load, mem-used")
    monkeypatch.setenv("MICROBATCH_MODEL__LABELS", '["ok", "anomaly"]')
    settings = load_settings()
    assert settings.model.features == ["cpu.load", "mem-used"]
    assert settings.model.labels == ["ok", "anomaly"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("cuda", ["CUDAExecutionProvider"]),
        ("CUDA,cpu", ["CUDAExecutionProvider", "CPUExecutionProvider"]),
        ("cpu,cuda", ["CPUExecutionProvider", "CUDAExecutionProvider"]),
        (
            "tensorrt,rocm,openvino",
            ["TensorrtExecutionProvider", "ROCMExecutionProvider", "OpenVINOExecutionProvider"],
        ),
        ("CPUExecutionProvider", ["CPUExecutionProvider"]),
    ],
)
def test_provider_aliases_are_canonicalised_in_order(monkeypatch, raw, expected):
    monkeypatch.setenv("MICROBATCH_MODEL__PROVIDERS", raw)
    assert load_settings().model.providers == expected


def test_kafka_extra_json_reaches_both_clients(monkeypatch):
    monkeypatch.setenv(
        "MICROBATCH_KAFKA__EXTRA", '{"socket.keepalive.enable": true, "statistics.interval.ms": 7}'
    )
    monkeypatch.setenv("MICROBATCH_KAFKA__CONSUMER_EXTRA", '{"fetch.min.bytes": 2048}')
    monkeypatch.setenv("MICROBATCH_KAFKA__PRODUCER_EXTRA", '{"compression.type": "zstd"}')
    kafka = load_settings().kafka
    consumer, producer = kafka.consumer_config(), kafka.producer_config()
    assert consumer["socket.keepalive.enable"] is True
    assert producer["socket.keepalive.enable"] is True
    assert consumer["statistics.interval.ms"] == producer["statistics.interval.ms"] == 7
    assert consumer["fetch.min.bytes"] == 2048
    assert "fetch.min.bytes" not in producer
    assert producer["compression.type"] == "zstd"
    assert "compression.type" not in consumer


def test_consumer_stores_offsets_only_on_request(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__GROUP_ID", "scorers")
    consumer = load_settings().kafka.consumer_config()
    assert consumer["enable.auto.offset.store"] is False
    assert consumer["group.id"] == "scorers"
    assert consumer["bootstrap.servers"]


def test_the_classic_protocol_is_cooperative_and_the_brokers_takes_no_client_side_group_options(
    monkeypatch,
):
    classic = load_settings().kafka.consumer_config()
    assert classic["group.protocol"] == "classic"
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert classic["session.timeout.ms"] == 45_000
    assert "group.instance.id" not in classic
    monkeypatch.setenv("MICROBATCH_KAFKA__GROUP_PROTOCOL", "consumer")
    monkeypatch.setenv("MICROBATCH_KAFKA__GROUP_INSTANCE_ID", "replica-0")
    consumer = load_settings().kafka.consumer_config()
    assert consumer["group.protocol"] == "consumer"
    assert consumer["group.instance.id"] == "replica-0"
    assert not {"partition.assignment.strategy", "session.timeout.ms"} & set(consumer)
    assert consumer["max.poll.interval.ms"] == classic["max.poll.interval.ms"]


@pytest.mark.parametrize("variable", ["EXTRA", "CONSUMER_EXTRA", "PRODUCER_EXTRA"])
@pytest.mark.parametrize(
    "option",
    [
        '"enable.auto.offset.store": true',
        '"enable.auto.commit": false',
        '"enable.idempotence": false',
        '"acks": "1"',
    ],
)
def test_no_extra_may_weaken_the_delivery_guarantee(monkeypatch, variable, option):
    monkeypatch.setenv(f"MICROBATCH_KAFKA__{variable}", "{" + option + "}")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == f"MICROBATCH_KAFKA__{variable}"
    assert "cannot be overridden" in str(info.value)


def test_max_poll_interval_below_the_session_timeout_is_refused(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__SESSION_TIMEOUT_MS", "400000")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "MICROBATCH_KAFKA__MAX_POLL_INTERVAL_MS"


def test_producer_is_idempotent_with_acks_all():
    producer = load_settings().kafka.producer_config()
    assert producer["enable.idempotence"] is True
    assert producer["acks"] == "all"


def test_secret_reaches_the_clients_but_never_the_logs(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("MICROBATCH_KAFKA__SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("MICROBATCH_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("MICROBATCH_KAFKA__SASL_PASSWORD", SECRET)
    settings = load_settings()
    assert settings.kafka.consumer_config()["sasl.password"] == SECRET
    assert settings.kafka.producer_config()["sasl.password"] == SECRET
    assert SECRET not in str(settings.kafka.summary())
    assert SECRET not in repr(settings.kafka)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in settings.model_dump_json()


def test_secret_is_not_echoed_in_a_config_error(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__SASL_PASSWORD", SECRET)
    monkeypatch.setenv("MICROBATCH_BATCH__MAX_SIZE", "abc")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        (
            {"MICROBATCH_BATCH__MIN_SIZE": "8", "MICROBATCH_BATCH__MAX_SIZE": "4"},
            "MICROBATCH_BATCH__MAX_SIZE",
        ),
        ({"MICROBATCH_BATCH__MAX_SIZE": "2"}, "MICROBATCH_BATCH__MAX_SIZE"),
        ({"MICROBATCH_BATCH__MAX_SIZE": "abc"}, "MICROBATCH_BATCH__MAX_SIZE"),
        ({"MICROBATCH_BATCH__MAX_WAIT_MS": "soon"}, "MICROBATCH_BATCH__MAX_WAIT_MS"),
        ({"MICROBATCH_BATCH__MAX_WAIT_MS": "0"}, "MICROBATCH_BATCH__MAX_WAIT_MS"),
        ({"MICROBATCH_INPUT__TOPICS": "logs,bad topic"}, "MICROBATCH_INPUT__TOPICS"),
        ({"MICROBATCH_INPUT__TOPICS": "logs,.."}, "MICROBATCH_INPUT__TOPICS"),
        ({"MICROBATCH_INPUT__TOPICS": '["logs",'}, "MICROBATCH_INPUT__TOPICS"),
        ({"MICROBATCH_OUTPUT__TOPIC": "results/v1"}, "MICROBATCH_OUTPUT__TOPIC"),
        ({"MICROBATCH_DLQ__TOPIC": "x" * 250}, "MICROBATCH_DLQ__TOPIC"),
        ({"MICROBATCH_MODEL__PATH": "/definitely/not/here/model.onnx"}, "MICROBATCH_MODEL__PATH"),
        (
            {"MICROBATCH_MODEL__TOKENIZER": "/definitely/not/here/tokenizer.json"},
            "MICROBATCH_MODEL__TOKENIZER",
        ),
        ({"MICROBATCH_MODEL__PROVIDERS": ""}, "MICROBATCH_MODEL__PROVIDERS"),
        ({"MICROBATCH_MODEL__MAX_LENGTH": "0"}, "MICROBATCH_MODEL__MAX_LENGTH"),
        ({"MICROBATCH_BATCH__MAX_SIZ": "32"}, "MICROBATCH_BATCH__MAX_SIZ"),
        ({"MICROBATCH_KAFKA__EXTRA": '{"linger.ms": 5'}, "MICROBATCH_KAFKA__EXTRA"),
        ({"MICROBATCH_KAFKA__CONSUMER_EXTRA": "[1, 2]"}, "MICROBATCH_KAFKA__CONSUMER_EXTRA"),
        ({"MICROBATCH_KAFKA__SECURITY_PROTOCOL": "CARRIER_PIGEON"}, "MICROBATCH_KAFKA__SECURITY_PROTOCOL"),
        ({"MICROBATCH_LOG__LEVEL": "loud"}, "MICROBATCH_LOG__LEVEL"),
        ({"MICROBATCH_BATCH__LATENCY_SLO_MS": "40"}, "MICROBATCH_BATCH__LATENCY_SLO_MS"),
        (
            {"MICROBATCH_BATCH__MAX_WAIT_MS": "500", "MICROBATCH_BATCH__LATENCY_SLO_MS": "400"},
            "MICROBATCH_BATCH__LATENCY_SLO_MS",
        ),
        ({"MICROBATCH_BATCH__ADAPTIVE": "sometimes"}, "MICROBATCH_BATCH__ADAPTIVE"),
        ({"MICROBATCH_KAFKA__GROUP_PROTOCOL": "eager"}, "MICROBATCH_KAFKA__GROUP_PROTOCOL"),
        ({"MICROBATCH_KAFKA__GROUP_INSTANCE_ID": ""}, "MICROBATCH_KAFKA__GROUP_INSTANCE_ID"),
        (
            {"MICROBATCH_KAFKA__GROUP_PROTOCOL": "consumer", "MICROBATCH_KAFKA__SESSION_TIMEOUT_MS": "10000"},
            "MICROBATCH_KAFKA__SESSION_TIMEOUT_MS",
        ),
        (
            {
                "MICROBATCH_KAFKA__GROUP_PROTOCOL": "consumer",
                "MICROBATCH_KAFKA__CONSUMER_EXTRA": '{"partition.assignment.strategy": "range"}',
            },
            "MICROBATCH_KAFKA__CONSUMER_EXTRA",
        ),
        ({"MICROBATCH_BATCH__LINGER_MS": "-1"}, "MICROBATCH_BATCH__LINGER_MS"),
        (
            {"MICROBATCH_BATCH__MAX_WAIT_MS": "5", "MICROBATCH_BATCH__LINGER_MS": "5"},
            "MICROBATCH_BATCH__LINGER_MS",
        ),
        ({"MICROBATCH_BATCH__PIPELINE_DEPTH": "-1"}, "MICROBATCH_BATCH__PIPELINE_DEPTH"),
        ({"MICROBATCH_BATCH__MAX_TOKENS": "-5"}, "MICROBATCH_BATCH__MAX_TOKENS"),
        ({"MICROBATCH_BATCH__BUCKET_WINDOW": "many"}, "MICROBATCH_BATCH__BUCKET_WINDOW"),
    ],
)
def test_invalid_values_name_the_exact_variable(monkeypatch, env, setting):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == setting
    assert setting in str(info.value)


@pytest.mark.parametrize(
    ("variable", "named", "suggested"),
    [
        ("MICROBATCH_BACTH__MAX_SIZE", "MICROBATCH_BACTH", "MICROBATCH_BATCH"),
        ("microbatch_kafak__group_id", "MICROBATCH_KAFAK", "MICROBATCH_KAFKA"),  # names are case-blind
        ("MICROBATCH_OUTPUTS__TOPIC", "MICROBATCH_OUTPUTS", "MICROBATCH_OUTPUT"),
        ("MICROBATCH_BATCH__MAX_SIZ", "MICROBATCH_BATCH__MAX_SIZ", "MICROBATCH_BATCH__MAX_SIZE"),
    ],
)
def test_an_unknown_name_is_refused_with_the_closest_known_one(monkeypatch, variable, named, suggested):
    monkeypatch.setenv(variable, "9")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == named
    assert f"did you mean {suggested}?" in str(info.value)


def test_names_without_the_delimiter_are_not_settings_and_are_left_alone(monkeypatch):
    # What Kubernetes service links and Docker links give a container next to a service "microbatch".
    monkeypatch.setenv("MICROBATCH_SERVICE_HOST", "10.0.0.7")
    monkeypatch.setenv("MICROBATCH_PORT", "tcp://10.0.0.7:9400")
    monkeypatch.setenv("MICROBATCH_PORT_9400_TCP_ADDR", "10.0.0.7")
    assert load_settings().batch.max_size == 16


def test_an_unknown_section_without_a_close_match_is_refused_plainly(monkeypatch):
    monkeypatch.setenv("MICROBATCH_ZZZ__Q", "1")
    with pytest.raises(ConfigError, match=r"^invalid setting MICROBATCH_ZZZ: unknown settings section$"):
        load_settings()


def test_an_unknown_section_in_the_dotenv_file_is_refused_too(isolated_env):
    (isolated_env / ".env").write_text("MICROBATCH_BACTH__MAX_SIZE=9\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "MICROBATCH_BACTH"


def test_variable_names_are_derived_from_the_settings_classes():
    for name, section in sections().items():
        assert Settings.model_fields[name].annotation is section
        for field in section.model_fields:
            assert section.env(field) == f"MICROBATCH_{name.upper()}__{field.upper()}"
    with pytest.raises(KeyError):
        BatchSettings.env("max_siz")


def test_unknown_field_error_says_it_is_unknown(monkeypatch):
    monkeypatch.setenv("MICROBATCH_BATCH__MAX_SIZ", "32")
    with pytest.raises(ConfigError, match="unknown"):
        load_settings()


def test_missing_model_file_error_names_the_setting_and_the_reason_not_the_value(monkeypatch, tmp_path):
    missing = tmp_path / "absent.onnx"
    monkeypatch.setenv("MICROBATCH_MODEL__PATH", str(missing))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "MICROBATCH_MODEL__PATH"
    assert "no such file" in str(info.value)
    assert str(missing) not in str(info.value)  # an error never quotes a setting's value


def test_existing_model_file_is_accepted(monkeypatch, tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not checked here")
    monkeypatch.setenv("MICROBATCH_MODEL__PATH", str(model))
    assert load_settings().model.path == model


def test_malformed_json_not_starting_with_a_brace_names_the_variable(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__EXTRA", "linger.ms=5")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "MICROBATCH_KAFKA__EXTRA"


def test_bad_value_inside_kafka_extra_names_the_variable(monkeypatch):
    monkeypatch.setenv("MICROBATCH_KAFKA__EXTRA", '{"linger.ms": [5]}')
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "MICROBATCH_KAFKA__EXTRA"


def test_min_size_above_the_default_max_size_is_refused(monkeypatch):
    monkeypatch.setenv("MICROBATCH_BATCH__MIN_SIZE", "32")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting in {"MICROBATCH_BATCH__MIN_SIZE", "MICROBATCH_BATCH__MAX_SIZE"}


def test_the_slo_only_has_to_exceed_the_window_when_batches_adapt(monkeypatch):
    monkeypatch.setenv("MICROBATCH_BATCH__MAX_WAIT_MS", "500")
    monkeypatch.setenv("MICROBATCH_BATCH__ADAPTIVE", "false")
    settings = load_settings()
    assert settings.batch.max_wait_ms == 500
    assert not settings.batch.adaptive


def test_dotenv_in_the_cwd_is_read_and_the_environment_wins(monkeypatch, isolated_env):
    (isolated_env / ".env").write_text("MICROBATCH_BATCH__MAX_SIZE=40\nMICROBATCH_OUTPUT__TOPIC=from-file\n")
    monkeypatch.setenv("MICROBATCH_OUTPUT__TOPIC", "from-env")
    settings = load_settings()
    assert settings.batch.max_size == 40
    assert settings.output.topic == "from-env"


def test_a_dotenv_elsewhere_does_not_leak_in(isolated_env):
    elsewhere = isolated_env / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text("MICROBATCH_BATCH__MAX_SIZE=41\n")
    assert load_settings().batch.max_size != 41


def test_settings_are_frozen():
    settings = load_settings()
    with pytest.raises(ValidationError):
        settings.batch.max_size = 1  # type: ignore[misc]


def test_require_topics_needs_an_input_topic():
    with pytest.raises(ConfigError) as info:
        require_topics(Settings())
    assert info.value.setting == "MICROBATCH_INPUT__TOPICS"


@pytest.mark.parametrize(
    ("section", "setting"), [("output", "MICROBATCH_OUTPUT__TOPIC"), ("dlq", "MICROBATCH_DLQ__TOPIC")]
)
def test_require_topics_refuses_an_output_that_is_also_an_input(section, setting):
    settings = Settings(input={"topics": ["logs", "metrics"]}, **{section: {"topic": "metrics"}})
    with pytest.raises(ConfigError) as info:
        require_topics(settings)
    assert info.value.setting == setting
    assert "MICROBATCH_INPUT__TOPICS" in str(info.value)  # names the clash, not the value


def test_require_topics_accepts_distinct_topics():
    require_topics(Settings(input={"topics": ["logs"]}, output={"topic": "out"}, dlq={"topic": "dead"}))


# -- the command line: exit 2, one line, no traceback -------------------------------------------------------


def run_cli(env: dict[str, str], cwd) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    clean["MICROBATCH_METRICS__PORT"] = "0"  # never collide with a service running on this host
    return subprocess.run(
        [sys.executable, "-m", "service", "run"],
        env=clean | env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"MICROBATCH_BATCH__MAX_SIZE": "abc"}, "MICROBATCH_BATCH__MAX_SIZE"),
        ({"MICROBATCH_INPUT__TOPICS": "bad topic"}, "MICROBATCH_INPUT__TOPICS"),
        ({"MICROBATCH_KAFKA__EXTRA": "{oops"}, "MICROBATCH_KAFKA__EXTRA"),
        ({}, "MICROBATCH_INPUT__TOPICS"),  # run needs an input topic
        ({"MICROBATCH_BACTH__MAX_SIZE": "9", "MICROBATCH_INPUT__TOPICS": "x"}, "MICROBATCH_BACTH"),
        ({"MICROBATCH_INPUT__TOPICS": "x", "MICROBATCH_DLQ__TOPIC": "x"}, "MICROBATCH_DLQ__TOPIC"),
    ],
)
def test_cli_bad_setting_exits_2_with_one_line_naming_it(isolated_env, env, setting):
    proc = run_cli(env, isolated_env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert setting in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.skipif(
    not reference.MANIFEST.is_file(),
    reason="service/models/manifest.json (the reference models) not built yet",
)
def test_cli_unknown_reference_model_exits_2_naming_the_setting(isolated_env):
    proc = run_cli({"MICROBATCH_MODEL__NAME": "nope", "MICROBATCH_INPUT__TOPICS": "x"}, isolated_env)
    assert proc.returncode == 2, proc.stderr
    assert "MICROBATCH_MODEL__NAME" in proc.stderr


# -- input formats and field paths ----------------------------------------------------------------------


def test_the_input_format_defaults_to_json_and_takes_every_documented_name(monkeypatch):
    assert load_settings().input.format == "json"
    for name in FORMATS:
        monkeypatch.setenv("MICROBATCH_INPUT__FORMAT", name)
        assert load_settings().input.format == name


def test_an_unknown_input_format_names_the_setting_and_the_choices(monkeypatch):
    monkeypatch.setenv("MICROBATCH_INPUT__FORMAT", "syslog-ng")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert err.value.setting == "MICROBATCH_INPUT__FORMAT"
    assert "otlp-proto" in str(err.value)
    assert "syslog-ng" not in str(err.value)  # the value is never quoted


def test_include_fields_are_a_comma_list_of_paths(monkeypatch):
    monkeypatch.setenv("MICROBATCH_OUTPUT__INCLUDE_FIELDS", "host.name, resource.service.name,severity_text")
    assert load_settings().output.include_fields == ["host.name", "resource.service.name", "severity_text"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MICROBATCH_OUTPUT__INCLUDE_FIELDS", "host,,x..y"),
        ("MICROBATCH_MODEL__FEATURES", "cpu,mem."),
        ("MICROBATCH_MODEL__TEXT_FIELD", "log\\"),
    ],
)
def test_a_bad_path_names_its_setting(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert err.value.setting == name


def test_an_empty_text_field_points_at_the_text_format(monkeypatch):
    monkeypatch.setenv("MICROBATCH_MODEL__TEXT_FIELD", "")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert err.value.setting == "MICROBATCH_MODEL__TEXT_FIELD"
    assert "MICROBATCH_INPUT__FORMAT=text" in str(err.value)


def test_a_drain_ceiling_below_max_size_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("MICROBATCH_BATCH__DRAIN_MAX_SIZE", "8")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert err.value.setting == "MICROBATCH_BATCH__DRAIN_MAX_SIZE"
    assert "MICROBATCH_BATCH__MAX_SIZE" in str(err.value)

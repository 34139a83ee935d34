# microbatch: `make demo` runs the main job, `make test` runs the whole suite. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA := deploy/kafka-local/kafka.sh
# Runs a command against a broker: one given or running, else this checkout's, started and stopped for it.
WITH_BROKER := $(BIN)/python deploy/kafka-local/with_broker.py
PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=

.PHONY: help venv test unit integration chaos soak sweep bench lint format docs demo kafka-up kafka-down kafka-status models clean

help:
	@echo "make demo        run the three reference models on a local broker with generated traffic (~1 min)"
	@echo "                 (installs the service alone, ~0.5 GB; make test installs the dev tools too, ~6.7 GB)"
	@echo "make test        install everything, lint (ruff, mypy), and run the whole test suite"
	@echo "make kafka-up    start the local Apache Kafka broker (127.0.0.1:\$${KAFKA_PORT:-9092})"
	@echo "make kafka-down  stop it"
	@echo "make chaos       only the fault-injection tests (part of make test)"
	@echo "make soak        10-minute soak benchmark (not a test)"
	@echo "make bench       the service against its baselines, side by side (~7 min; BENCH_ARGS=--quick)"
	@echo "make sweep       batch-size sweep of both reference models (~30 s; SWEEP_ARGS=--pipeline ~2 min, needs the broker)"
	@echo "make models      retrain and export the reference models"

# One venv, two installs, each redone when pyproject.toml changes. The demo's: the service alone (-e .,
# ~0.5 GB: no torch, no CUDA wheels, no converters). Everything else's: the dev extra on top (~6.7 GB; uv
# installs the large torch wheels in seconds). uv pip install adds and never removes, so the demo's install
# after the full one changes nothing.
$(BIN)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e .
	touch $@

$(BIN)/.installed: $(BIN)/.installed-demo
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# ruff (lint and format), then the type checker: strict on the run path, which holds the real clients,
# engine and telemetry to the Protocols the loop drives (pyproject.toml, [tool.mypy]).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The settings reference, docs/CONFIG.md and .env.example, rendered from the settings' field docstrings;
# tests/unit/config/test_reference.py fails while either differs from what this writes.
docs: venv
	$(BIN)/python -m service.config.reference

# The integration tests start the broker themselves (and stop it), unless KAFKA_BOOTSTRAP_SERVERS is set.
test: venv lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: venv
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: venv
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

# Fault injection: crashes, rebalances, broker restarts and freezes, bad input, start-up faults.
chaos: venv
	$(BIN)/python -m pytest tests/chaos $(PYTEST_ARGS)

# Not a test: ~12 minutes at half the sustainable rate; figures go in docs/RELIABILITY.md.
soak: venv
	@$(WITH_BROKER) $(BIN)/python bench/soak.py $(SOAK_ARGS)

# Not a test: throughput and latency per batch size of the engine alone (no broker); SWEEP_ARGS=--pipeline
# also drains the whole service at each size on the broker (start it first: make kafka-up). docs/BENCHMARKS.md.
sweep: venv
	@mkdir -p bench/results docs/images
	@for model in metrics-anomaly log-classifier; do \
		$(BIN)/microbatch sweep --model $$model --out bench/results $(SWEEP_ARGS) || exit 1; \
		cp bench/results/sweep-$$model.png docs/images/sweep-$$model.png || exit 1; \
	done

# Not a test: the service against its baselines on the local broker (~7 minutes); results in bench/results,
# tables in docs/BENCHMARKS.md. The broker: as for demo (below), started and stopped only if none was there.
bench: venv
	@$(WITH_BROKER) $(BIN)/python -m bench $(BENCH_ARGS)

kafka-up:
	$(KAFKA) up

kafka-down:
	$(KAFKA) down

kafka-status:
	$(KAFKA) status

# The demo needs the service only. Its broker: MICROBATCH_KAFKA__BOOTSTRAP_SERVERS, else this checkout's
# when it runs, else a Kafka already answering on 127.0.0.1:KAFKA_PORT (9092), else one of this checkout's
# started on free ports and stopped afterwards (deploy/kafka-local/with_broker.py).
demo: $(BIN)/.installed-demo
	@$(WITH_BROKER) $(BIN)/microbatch demo $(DEMO_ARGS)

# Retrains with torch (the models extra) into service/models/. modelbuild/, like bench/, is a package of this
# checkout: the installed service does not hold it.
models: venv
	$(BIN)/python -m modelbuild

clean:
	-$(KAFKA) down
	rm -rf .local .pytest_cache .ruff_cache

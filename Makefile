# microbatch: `make demo` runs the main job, `make test` runs the whole suite. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA := deploy/kafka-local/kafka.sh
PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=

.PHONY: help venv test unit integration chaos soak sweep bench lint format demo kafka-up kafka-down kafka-status models clean

help:
	@echo "make demo        run the three reference models on a local broker with generated traffic (~1 min)"
	@echo "make test        install everything, lint (ruff, mypy), and run the whole test suite"
	@echo "make kafka-up    start the local Apache Kafka broker (127.0.0.1:\$${KAFKA_PORT:-9092})"
	@echo "make kafka-down  stop it"
	@echo "make chaos       only the fault-injection tests (part of make test)"
	@echo "make soak        10-minute soak benchmark (not a test)"
	@echo "make bench       the service against its baselines, side by side (~7 min; BENCH_ARGS=--quick)"
	@echo "make sweep       batch-size sweep of both reference models (~30 s; SWEEP_ARGS=--pipeline ~2 min, needs the broker)"
	@echo "make models      retrain and export the reference models"

# The venv is rebuilt whenever pyproject.toml changes. uv installs the (large) torch wheels in seconds.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
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
	@started=0; \
	if ! $(KAFKA) status >/dev/null 2>&1; then $(KAFKA) up || exit 1; started=1; fi; \
	$(BIN)/python bench/soak.py $(SOAK_ARGS); rc=$$?; \
	if [ $$started = 1 ]; then $(KAFKA) down; fi; \
	exit $$rc

# Not a test: throughput and latency per batch size of the engine alone (no broker); SWEEP_ARGS=--pipeline
# also drains the whole service at each size on the broker (start it first: make kafka-up). docs/BENCHMARKS.md.
sweep: venv
	@mkdir -p bench/results docs/images
	@for model in metrics-anomaly log-classifier; do \
		$(BIN)/microbatch sweep --model $$model --out bench/results $(SWEEP_ARGS) || exit 1; \
		cp bench/results/sweep-$$model.png docs/images/sweep-$$model.png || exit 1; \
	done

# Not a test: the service against its baselines on the local broker (~7 minutes); results in bench/results,
# tables in docs/BENCHMARKS.md. Starts the broker if it is not running and stops it only if it started it.
bench: venv
	@started=0; \
	if ! $(KAFKA) status >/dev/null 2>&1; then $(KAFKA) up || exit 1; started=1; fi; \
	MICROBATCH_KAFKA__BOOTSTRAP_SERVERS="$${MICROBATCH_KAFKA__BOOTSTRAP_SERVERS:-127.0.0.1:$${KAFKA_PORT:-9092}}" \
		$(BIN)/python -m bench $(BENCH_ARGS); rc=$$?; \
	if [ $$started = 1 ]; then $(KAFKA) down; fi; \
	exit $$rc

kafka-up:
	$(KAFKA) up

kafka-down:
	$(KAFKA) down

kafka-status:
	$(KAFKA) status

# Starts the broker if it is not running, and stops it again afterwards only if it started it.
demo: venv
	@started=0; \
	if ! $(KAFKA) status >/dev/null 2>&1; then $(KAFKA) up || exit 1; started=1; fi; \
	$(BIN)/microbatch demo $(DEMO_ARGS); rc=$$?; \
	if [ $$started = 1 ]; then $(KAFKA) down; fi; \
	exit $$rc

# Retrains with torch (the models extra) into service/models/. modelbuild/, like bench/, is a package of this
# checkout: the installed service does not hold it.
models: venv
	$(BIN)/python -m modelbuild

clean:
	-$(KAFKA) down
	rm -rf .local .pytest_cache .ruff_cache

# `make run` and `make test` each bootstrap first (idempotent, fast when ready).
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: bootstrap run test lint bench

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	$(VENV)/bin/kchaos run

test: bootstrap
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: bootstrap
	$(VENV)/bin/ruff check .

bench: bootstrap
	$(PY) bench/linearizability.py

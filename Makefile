# `make run` and `make test` each bootstrap first (idempotent, fast when ready).
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: bootstrap run test test-docker lint bench

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	$(VENV)/bin/kchaos run

test: bootstrap
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

test-docker: bootstrap
	KCHAOS_DOCKER_IMAGE_TESTS=1 $(PY) -m pytest -q tests/harness/test_docker_smoke.py tests/harness/test_docker_cluster.py tests/harness/test_docker_run.py

lint: bootstrap
	$(VENV)/bin/ruff check .

bench: bootstrap
	$(PY) bench/linearizability.py
	$(PY) bench/lin_vs_porcupine.py

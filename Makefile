# `make run` and `make test` each bootstrap first (idempotent, fast when ready).
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

# `make docs` builds the documentation into build/site/ (git-ignored); a dead link, a
# missing anchor or a page left out of mkdocs.yml's nav fails the build.
.PHONY: bootstrap run test test-unit test-long test-clients test-kraft test-all test-fresh docs typecheck \
	coverage-html test-docker lint bench nightly-smoke vagrant-bootstrap vagrant-box test-vagrant

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	$(VENV)/bin/kchaos run

# After the bootstrap every need of a test is met: a test that would skip for a missing tool
# fails instead (tests/support/requirements.py).
test test-unit test-long test-clients test-kraft: export KCHAOS_REQUIRE_ALL := 1

# The fast tier on a test process per core, then the cluster and Spark tests one at a time (they
# share a ZooKeeper and the machine's namespaces) at smoke depth: the tests marked `long` or
# `clients` run in test-long and test-clients, those marked `kraft` in test-kraft. Coverage of the six packages in the pytest
# processes (brokers and Spark workers that the tests start as processes of their own are not
# measured): the total and the ten least-covered modules.
test: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir build/site
	$(PY) -m pytest -q -n 2 -m "not cluster and not spark" --cov --cov-report=
	$(PY) -m pytest -q -m "(cluster or spark) and not long and not clients and not kraft" --cov --cov-append \
		--cov-report= --durations=20
	@mkdir -p build && $(PY) -m coverage report > build/coverage.txt
	@echo "least-covered modules (all of them: build/coverage.txt, make coverage-html):"
	@head -n 12 build/coverage.txt
	@grep '^TOTAL' build/coverage.txt

typecheck: bootstrap
	$(VENV)/bin/mypy

coverage-html:
	$(PY) -m coverage html
	@echo "build/coverage/index.html"

docs: bootstrap
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

# The inner loop: no cluster, no Spark session (pytest markers), a test process per core.
test-unit: bootstrap
	$(PY) -m pytest -q -n auto -m "not cluster and not spark"

# What make test leaves out: long runs and variants, and the tests repeated with each further
# client library or against Apache Kafka as the reference.
test-long: bootstrap
	$(PY) -m pytest -q -m long --durations=10

test-clients: bootstrap
	$(PY) -m pytest -q -m clients --durations=10

# Apache Kafka in KRaft mode: clusters with combined and dedicated controllers, the quorum
# faults (make test runs a KRaft smoke).
test-kraft: bootstrap
	$(PY) -m pytest -q -m kraft --durations=10

# Every test of the repository on this machine (test-vagrant needs KVM: make vagrant-bootstrap).
test-all: test test-long test-clients test-kraft test-docker test-vagrant

# The bootstrap and test-unit plus a short run in a clean Debian 12 container.
test-fresh: bootstrap
	$(PY) scripts/fresh_machine.py

test-docker: bootstrap
	KCHAOS_DOCKER_IMAGE_TESTS=1 $(PY) -m pytest -q tests/harness/test_docker_smoke.py tests/harness/test_docker_cluster.py tests/harness/test_docker_run.py

# KVM machines of vagrant/Vagrantfile, with libvirtd in a network namespace of its own.
vagrant-bootstrap: bootstrap
	@bash scripts/bootstrap-vagrant.sh

vagrant-box: vagrant-bootstrap
	$(PY) -m harness.control.vagrant_box

test-vagrant: vagrant-box
	KCHAOS_VAGRANT_TESTS=1 $(PY) -m pytest -q -s tests/harness/test_vagrant_cluster.py

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: bootstrap
	$(PY) bench/linearizability.py
	$(PY) bench/lin_vs_porcupine.py

nightly-smoke: bootstrap
	$(VENV)/bin/kchaos nightly --suite smoke

# The targets `make test` leaves out, each recorded as a row of docs/results/targets.md
# (date, commit, machine, result, duration, pytest's counts): a nightly job's command.
.PHONY: record-targets
record-targets: bootstrap
	$(PY) scripts/record_target.py test-long test-clients test-docker test-vagrant

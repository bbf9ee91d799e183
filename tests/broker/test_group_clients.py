"""Consumer groups with real clients: the storyline of
tests/support/group_storyline.py for confluent-kafka, kafka-python, aiokafka, kcat and the
Java client, against our broker (`kchaos`) and against Apache Kafka 3.9.1 (`kafka`, when
its jars are cached), three loopback brokers of each sharing one ZooKeeper.

One cluster per system serves the whole module (each storyline has its own topic and
group); the clients' ids hold no "kafka", so `-k kafka` selects Apache Kafka alone. The
measured seconds are printed (`-s`). `make test` runs confluent-kafka against our broker;
`make test-clients` (marker `clients`) every other client, and every client against Kafka.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.support import requirements
from tests.support.brokers import BrokerCluster
from tests.support.group_clients import CLIENTS, unavailable
from tests.support.group_storyline import SYSTEMS, Storyline, new_cluster, system_unavailable

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


SMOKE = ("kchaos", "confluent")


def storylines() -> list:
    params = []
    for system in SYSTEMS:
        for client in CLIENTS:
            unmet = [r for r in (system_unavailable(system), unavailable(client)) if r]
            marks = [requirements.needs(False, unmet[0])] if unmet else []
            if (system, client) != SMOKE:
                marks.append(pytest.mark.clients)
            params.append(pytest.param(system, client, id=f"{system}-{client}", marks=marks))
    return params


@pytest.fixture(scope="module")
def clusters(zookeeper, tmp_path_factory):
    """system -> its running cluster; one at a time (the storylines come system by system)."""
    running: dict[str, tuple[BrokerCluster, contextlib.ExitStack]] = {}

    def cluster(system: str) -> BrokerCluster:
        for other in [name for name in running if name != system]:
            running.pop(other)[1].close()
        if system not in running:
            stack = contextlib.ExitStack()
            directory = tmp_path_factory.mktemp(f"groups-{system}")
            running[system] = (stack.enter_context(
                new_cluster(system, zookeeper.connect, directory)), stack)
        return running[system][0]

    try:
        yield cluster
    finally:
        for _, stack in running.values():
            stack.close()


@pytest.mark.parametrize(("system", "client"), storylines())
def test_group_storyline(system, client, clusters, tmp_path):
    storyline = Storyline(clusters(system), client, tmp_path, f"groups-{client}-{system}")
    try:
        storyline.run()
    finally:
        measured = ", ".join(f"{name}={seconds:.2f}s"
                             for name, seconds in storyline.timings.items())
        print(f"\n{system} {client}: {measured or 'nothing measured'}")

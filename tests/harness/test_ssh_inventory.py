"""TOML inventories: defaults, per-node fields, paths, validation with the file named."""

from __future__ import annotations

import pytest

from harness.control import ProvisionError
from harness.control.inventory import Inventory, load_inventory

INVENTORY = """\
[defaults]
user = "kchaos"
key_file = "keys/id_ed25519"
dir = "/srv/kchaos"

[[node]]
name = "n1"
host = "192.0.2.11"
role = "broker"
address = "10.0.0.11"

[[node]]
name = "z1"
host = "192.0.2.21"
port = 2201
role = "zookeeper"
user = "root"
python = "/opt/venv/bin/python"
"""


def test_defaults_apply_and_nodes_override(tmp_path):
    path = tmp_path / "hosts.toml"
    path.write_text(INVENTORY)
    inventory = load_inventory(path)
    n1, z1 = inventory.host("n1"), inventory.host("z1")
    assert inventory.names == ("n1", "z1")
    assert (n1.user, n1.port, n1.service_address, n1.home) == (
        "kchaos", 22, "10.0.0.11", "/srv/kchaos/n1")
    assert n1.key_file == str(tmp_path / "keys" / "id_ed25519")
    assert n1.known_hosts.endswith("/.ssh/known_hosts") and n1.python is None
    assert (z1.user, z1.port, z1.service_address, z1.python) == (
        "root", 2201, "192.0.2.21", "/opt/venv/bin/python")
    assert inventory.with_role("zookeeper") == ("z1",)
    assert Inventory.from_json(inventory.to_json()) == inventory


@pytest.mark.parametrize("text, message", [
    ("[[node]]\nname = 'n1'\nhost = 'h'\n", "needs name, host and role"),
    ("[[node]]\nname = 'n1'\nhost = 'h'\nrole = 'kafka'\n", "role must be one of"),
    ("[[node]]\nname = 'N 1'\nhost = 'h'\nrole = 'broker'\n", "node name"),
    ("[[node]]\nname = 'n1'\nhost = 'h'\nrole = 'broker'\npassword = 'x'\n", "may have"),
    ("[defaults]\nname = 'n1'\n", "unknown keys"),
    ("[nodes]\n", "unknown keys"),
    ("[[node]]\nname = 'n1'\nhost = 'h'\nrole = 'broker'\n" * 2, "duplicate node names"),
    ("", "no nodes"),
    ("[[node]\n", "hosts.toml"),
])
def test_bad_inventories_are_refused(tmp_path, text, message):
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    with pytest.raises(ProvisionError, match=message):
        load_inventory(path)

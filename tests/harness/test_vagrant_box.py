"""The box recipe's content key and GRUB's placement on the raw disk (pure parts of
harness.control.vagrant_box; `make test-vagrant` builds and boots the box itself)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.control.errors import ProvisionError
from harness.control.vagrant_box import (
    PACKAGES,
    PARTITION_START,
    BoxRecipe,
    _install_grub,
    box_path,
)


def test_the_key_names_the_content_of_the_box(tmp_path):
    recipe = BoxRecipe(insecure_key="ssh-rsa AAAA vagrant")
    assert recipe.key() == BoxRecipe(insecure_key="ssh-rsa AAAA vagrant").key()
    assert recipe.key() != replace(recipe, packages=(*PACKAGES, "strace")).key()
    assert recipe.key() != replace(recipe, insecure_key="ssh-ed25519 BBBB").key()
    assert recipe.key() != replace(recipe, disk_gib=16).key()
    assert box_path(recipe, tmp_path) == tmp_path / f"kchaos-bookworm64-{recipe.key()[:16]}.box"
    assert {"openssh-server", "zookeeper", "default-jre-headless", "python3-venv",
            "nftables", "procps", "linux-image-amd64"} <= set(recipe.packages)


def test_grub_goes_before_the_partition_table_and_into_the_gap(tmp_path):
    raw = tmp_path / "disk.raw"
    table = bytes(range(64)) + b"\x55\xaa"  # partition entries and signature: kept
    raw.write_bytes(b"\0" * 446 + table + b"\0" * (PARTITION_START - 512))
    _install_grub(raw, b"B" * 512, b"C" * 4096)
    disk = raw.read_bytes()
    assert disk[:440] == b"B" * 440 and disk[440:446] == b"\0" * 6
    assert disk[446:512] == table
    assert disk[512:512 + 4096] == b"C" * 4096
    with pytest.raises(ProvisionError, match="does not fit"):
        _install_grub(raw, b"B" * 512, b"C" * PARTITION_START)

"""Provisioning over SSH: the Debian/Ubuntu packages a node needs, and kchaos in a venv.

For each host of an `SSHRemote`, in parallel:

1. packages: those of `PACKAGES` that `dpkg-query` does not report installed are installed
   with `apt-get install` (after `apt-get update`); nothing happens when all are there.
2. kchaos: hosts whose inventory names a `python` (one that already has kchaos, e.g. this
   machine's venv when the hosts share its filesystem) are only checked to import the
   broker. Every other host gets the wheels built here, `pip wheel --no-deps .` plus the
   broker's runtime dependencies at the versions installed here, uploaded to
   `<dir>/<node>/wheels/` and installed into `<dir>/<node>/venv` (offline; a dependency
   whose wheel does not fit the node's Python comes from the node's package index; with
   `OFFLINE_WHEELS` present, the wheels are built here without any package index). The
   set of wheels is recorded in the venv, so provisioning again is a no-op.

Each node keeps its files under its own `<dir>/<node>`, so hosts sharing one filesystem
do not collide. Services are started detached by `harness.db` through `SSHRemote.spawn`.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.control.errors import CommandFailed, ProvisionError, RemoteError
from harness.control.ssh import SSHRemote

__all__ = ["PACKAGES", "RUNTIME_REQUIREMENTS", "Wheels", "build_wheels", "provision_hosts"]

PACKAGES = ("default-jre-headless", "zookeeper", "nftables", "python3-venv", "procps")
RUNTIME_REQUIREMENTS = ("kazoo", "kafka-python", "crc32c")
MARKER = ".kchaos-wheels"
SOURCE = Path(__file__).resolve().parents[2]
# Wheels of the build backend and of RUNTIME_REQUIREMENTS, fetched by
# scripts/bootstrap-vagrant.sh: with them, wheels are built without a package index (a
# harness inside a network namespace has none).
OFFLINE_WHEELS = SOURCE / ".cache" / "offline-wheels"


@dataclass(frozen=True)
class Wheels:
    """Wheel files built on the controlling host and a digest of their contents."""

    files: tuple[Path, ...]
    digest: str

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(f"{r}=={metadata.version(r)}" for r in RUNTIME_REQUIREMENTS)


def build_wheels(directory: Path, source: Path = SOURCE) -> Wheels:
    """`pip wheel` kchaos (no dependencies) from `source` and the broker's runtime
    dependencies at this environment's versions, into `directory`."""
    if not (source / "pyproject.toml").exists():
        raise ProvisionError(f"no kchaos source at {source} to build a wheel from")
    requirements = [f"{r}=={metadata.version(r)}" for r in RUNTIME_REQUIREMENTS]
    offline = OFFLINE_WHEELS if any(OFFLINE_WHEELS.glob("*.whl")) else None
    index = ["--no-index", "--find-links", str(offline)] if offline else []
    for targets in ([str(source)], requirements):
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                               *index, "-w", str(directory), *targets],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ProvisionError(f"pip wheel {' '.join(targets)}: {done.stderr.strip()[-800:]}")
    files = tuple(sorted(directory.glob("*.whl")))
    digest = hashlib.sha256()
    for path in files:  # entry names and CRCs: a rebuild of the same source has new mtimes
        with zipfile.ZipFile(path) as wheel:
            entries = sorted((i.filename, i.CRC) for i in wheel.infolist())
        digest.update(repr((path.name, entries)).encode())
    return Wheels(files, digest.hexdigest())


def provision_hosts(remote: SSHRemote, packages: tuple[str, ...] = PACKAGES,
                    wheels: Wheels | None = None) -> dict[str, list[str]]:
    """Provision every host (see the module docstring); returns what was done per node.
    Raises ProvisionError naming the nodes that failed."""
    needs_venv = [n for n in remote.nodes if not remote.inventory.host(n).python]

    def one(node: str) -> list[str]:
        steps = install_packages(remote, node, packages)
        if node in needs_venv:
            steps += install_kchaos(remote, node, wheels)
        else:
            check_python(remote, node)
        return steps

    with tempfile.TemporaryDirectory(prefix="kchaos-wheels-") as scratch:
        if needs_venv and wheels is None:
            wheels = build_wheels(Path(scratch))
        with ThreadPoolExecutor(max_workers=max(1, len(remote.nodes))) as pool:
            futures = {node: pool.submit(one, node) for node in remote.nodes}
        done, errors = {}, []
        for node, future in futures.items():
            try:
                done[node] = future.result()
            except RemoteError as error:
                errors.append(error)
    if errors:
        raise ProvisionError("provisioning failed: " + "; ".join(str(e) for e in errors))
    return done


def install_packages(remote: SSHRemote, node: str, packages: tuple[str, ...]) -> list[str]:
    """apt-get install what is missing; returns ["packages: a b"] or []."""
    if not packages:
        return []
    query = remote.exec(node, ["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *packages],
                        check=False)
    installed = {line.split()[0] for line in query.out.splitlines()
                 if line.endswith(" installed")}
    missing = [p for p in packages if p not in installed]
    if not missing:
        return []
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y"]
    try:
        remote.exec(node, [*apt, "update"], timeout=600)
        remote.exec(node, [*apt, "install", "--no-install-recommends", *missing],
                    timeout=1800)
    except CommandFailed as error:
        raise ProvisionError(f"{node}: cannot install {' '.join(missing)}: {error}") from error
    return [f"packages: {' '.join(missing)}"]


def install_kchaos(remote: SSHRemote, node: str, wheels: Wheels) -> list[str]:
    """Upload the wheels and install them into `<home>/venv` unless it already has them."""
    home = remote.inventory.host(node).home
    venv, target = f"{home}/venv", f"{home}/wheels"
    marker = remote.exec(node, ["cat", f"{venv}/{MARKER}"], check=False).out.strip()
    if marker == wheels.digest:
        return []
    remote.exec(node, ["rm", "-rf", target])
    for path in wheels.files:
        remote.upload(node, path, f"{target}/{path.name}")
    pip = f"{venv}/bin/pip"
    names = [f"{target}/{path.name}" for path in wheels.files]
    try:
        remote.exec(node, ["sh", "-c", f"test -x {shlex.quote(pip)} || python3 -m venv "
                                       f"{shlex.quote(venv)}"], timeout=300)
        offline = remote.exec(node, [pip, "install", "-q", "--no-index", "--no-deps",
                                     "--force-reinstall", *names], check=False, timeout=600)
        if offline.exit != 0:
            kchaos = [n for n in names if Path(n).name.startswith("kchaos-")]
            remote.exec(node, [pip, "install", "-q", "--no-deps", "--force-reinstall",
                               *kchaos], timeout=600)
            remote.exec(node, [pip, "install", "-q", "--find-links", target,
                               *wheels.requirements], timeout=1200)
        check_python(remote, node)
    except CommandFailed as error:
        raise ProvisionError(f"{node}: cannot install kchaos into {venv}: {error}") from error
    remote.exec(node, ["sh", "-c", f"echo {wheels.digest} > {shlex.quote(venv)}/{MARKER}"])
    return [f"kchaos: {len(wheels.files)} wheels into {venv}"]


def check_python(remote: SSHRemote, node: str) -> None:
    """The node's Python (the `python` wrapper) imports the broker and its dependencies."""
    probe = remote.exec(node, [remote.python, "-c", "import broker, kazoo, kafka, crc32c"],
                        check=False, timeout=120)
    if probe.exit != 0:
        raise ProvisionError(f"{node}: its Python cannot run the broker: "
                             f"{probe.err.strip()[-500:]}")

"""Node images for the docker backend, built on this machine with no registry.

Three images, each `FROM` the one before:

    base     kchaos/base:<key>     `debootstrap --variant=minbase bookworm`, imported as is
    system   kchaos/system:<key>   + python3, venv, a Java runtime, zookeeper, nftables,
                                     iptables, iproute2, procps (apt, from Debian's mirror)
    run      kchaos/run:<prefix>   + /opt/kchaos, a venv holding the kchaos wheel built from
                                     this checkout and the broker's own dependencies

`base` and `system` are cached: each carries the label `kchaos.content`, a hash of its
recipe (and of its parent's), and is reused while an image with that label exists, so
only the first run on a machine pays for debootstrap and apt. The `run` image carries the
label `kchaos.run=<prefix>` and belongs to that run: its teardown removes it.

`tiny_image` is for smoke tests: a few MB from this machine's own files (busybox-static,
nft and its libraries), imported in a second, with no network at all.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from harness.control.errors import ProvisionError

__all__ = [
    "BROKER_REQUIREMENTS",
    "SYSTEM_PACKAGES",
    "NODE_PYTHON",
    "ImageRecipe",
    "build_run_image",
    "default_image_cache",
    "ensure_base",
    "ensure_system",
    "tiny_image",
]

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SYSTEM_PACKAGES = ("python3", "python3-venv", "openjdk-17-jre-headless", "zookeeper",
                   "nftables", "iptables", "iproute2", "procps")
BROKER_REQUIREMENTS = ("kazoo==2.11.0", "kafka-python==3.0.12", "crc32c==2.9.post0")
NODE_VENV = "/opt/kchaos"
NODE_PYTHON = f"{NODE_VENV}/bin/python"
CONTENT_LABEL = "kchaos.content"
RUN_LABEL = "kchaos.run"
RECIPE_VERSION = 1
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ImageRecipe:
    """What the cached images are made of; its `key`s name them."""

    suite: str = SUITE
    mirror: str = MIRROR
    packages: tuple[str, ...] = SYSTEM_PACKAGES

    def base_key(self) -> str:
        return _digest({"v": RECIPE_VERSION, "suite": self.suite, "mirror": self.mirror})

    def system_key(self) -> str:
        return _digest({"base": self.base_key(), "packages": sorted(self.packages)})


def ensure_base(client: docker.DockerClient, recipe: ImageRecipe = ImageRecipe(),
                workdir: Path | None = None) -> str:
    """The debootstrapped base image, built unless one with its content label exists."""
    key = recipe.base_key()
    if cached := _find(client, key):
        return cached
    if shutil.which("debootstrap") is None:
        raise ProvisionError("debootstrap is not installed (apt-get install debootstrap)")
    tag = f"kchaos/base:{key[:12]}"
    with tempfile.TemporaryDirectory(prefix="kchaos-base-", dir=workdir) as temporary:
        root = Path(temporary) / "root"
        _run(["debootstrap", "--variant=minbase", recipe.suite, str(root), recipe.mirror],
             timeout=1800)
        archive = Path(temporary) / "root.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(archive), "."],
             timeout=600)
        shutil.rmtree(root)
        try:
            client.api.import_image_from_file(
                str(archive), repository="kchaos/base", tag=key[:12],
                changes=[f"LABEL {CONTENT_LABEL}={key}", 'CMD ["/bin/bash"]',
                         "ENV LANG=C.UTF-8"])
        except docker.errors.DockerException as error:
            raise ProvisionError(f"docker import of the base image failed: {error}") from error
    return tag


def ensure_system(client: docker.DockerClient, recipe: ImageRecipe = ImageRecipe(),
                  cache_dir: Path | None = None) -> str:
    """The base image plus Debian's packages for a node, built once per recipe: found in
    the daemon by its content label, else loaded from `cache_dir` (default
    `default_image_cache()`), else built and saved there for the next daemon."""
    key = recipe.system_key()
    if cached := _find(client, key):
        return cached
    archive = (cache_dir or default_image_cache()) / f"system-{key[:16]}.tar"
    if archive.exists():
        try:
            with open(archive, "rb") as data:
                client.api.load_image(data)
        except (OSError, docker.errors.DockerException):
            archive.unlink(missing_ok=True)
        if cached := _find(client, key):
            return cached
    base = ensure_base(client, recipe)
    dockerfile = "\n".join([
        f"FROM {base}",
        f"LABEL {CONTENT_LABEL}={key}",
        "ENV DEBIAN_FRONTEND=noninteractive",
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends "
        f"{' '.join(recipe.packages)} >/dev/null && rm -rf /var/lib/apt/lists/*",
    ]) + "\n"
    tag = _build(client, dockerfile, {}, f"kchaos/system:{key[:12]}")
    _save(client, tag, archive)
    return tag


def default_image_cache() -> Path:
    """Where built system images are saved: $KCHAOS_IMAGE_CACHE, else /var/cache/kchaos/images
    for root, else ~/.cache/kchaos/images."""
    if "KCHAOS_IMAGE_CACHE" in os.environ:
        return Path(os.environ["KCHAOS_IMAGE_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/kchaos/images")
    return Path.home() / ".cache" / "kchaos" / "images"


def build_run_image(client: docker.DockerClient, prefix: str,
                    recipe: ImageRecipe = ImageRecipe(), cache_dir: Path | None = None) -> str:
    """The system image plus kchaos (a wheel of this checkout) in a venv at /opt/kchaos."""
    system = ensure_system(client, recipe, cache_dir)
    with tempfile.TemporaryDirectory(prefix="kchaos-wheels-") as wheels:
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels,
              str(REPOSITORY_ROOT), *BROKER_REQUIREMENTS], timeout=600)
        files = {f"wheels/{p.name}": p.read_bytes() for p in Path(wheels).glob("*.whl")}
    dockerfile = "\n".join([
        f"FROM {system}",
        f"LABEL {RUN_LABEL}={prefix}",
        "COPY wheels /tmp/wheels",
        f"RUN python3 -m venv {NODE_VENV} && {NODE_VENV}/bin/pip install -q --no-index "
        "--no-deps /tmp/wheels/*.whl && rm -rf /tmp/wheels "
        f"&& {NODE_PYTHON} -c 'import broker, kazoo, kafka, crc32c'",
    ]) + "\n"
    return _build(client, dockerfile, files, f"kchaos/run:{prefix}")


def tiny_image(client: docker.DockerClient, tag: str, labels: dict[str, str]) -> str:
    """A few-MB image of this machine's busybox-static and nft, for smoke tests."""
    busybox = shutil.which("busybox")
    nft = shutil.which("nft")
    if busybox is None or nft is None:
        raise ProvisionError("the tiny image needs busybox-static and nftables installed")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("bin", "sbin", "tmp", "proc", "sys", "dev", "etc", "run"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in ("sh", "sleep", "cat", "kill", "nc", "setsid", "timeout", "mkdir",
                       "echo", "ls", "rm", "dirname", "ps", "true", "false"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        for path in (nft, *_shared_libraries(nft)):  # files, not the host's symlinks
            tar.add(os.path.realpath(path), path.lstrip("/") if path != nft else "sbin/nft")
    changes = ['CMD ["/bin/sleep", "infinity"]', "ENV PATH=/sbin:/bin"]
    changes += [f"LABEL {key}={value}" for key, value in labels.items()]
    try:
        client.api.import_image_from_data(buffer.getvalue(), repository=tag.split(":")[0],
                                          tag=tag.split(":")[1], changes=changes)
    except docker.errors.DockerException as error:
        raise ProvisionError(f"docker import of {tag} failed: {error}") from error
    return tag


def _shared_libraries(binary: str) -> list[str]:
    """The resolved paths of every library `binary` loads, and the dynamic loader."""
    out = _run(["ldd", binary], timeout=30)
    paths = []
    for line in out.splitlines():
        parts = line.split()
        for part in parts:
            if part.startswith("/"):
                paths.append(part)
                break
    return sorted({p for p in paths if Path(p).exists()})


def _build(client: docker.DockerClient, dockerfile: str, files: dict[str, bytes], tag: str) -> str:
    """`docker build` of a context holding `dockerfile` and `files`, on the host's network
    (so apt reaches the mirror without NAT); raises ProvisionError with the build log."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    log: list[str] = []
    try:
        for chunk in client.api.build(fileobj=buffer, custom_context=True, tag=tag, rm=True,
                                      forcerm=True, network_mode="host", decode=True):
            if "stream" in chunk:
                log.append(chunk["stream"])
            if "error" in chunk:
                raise ProvisionError(f"docker build of {tag} failed: {chunk['error'].strip()}"
                                     f"\n{''.join(log[-20:])}")
    except docker.errors.DockerException as error:
        raise ProvisionError(f"docker build of {tag} failed: {error}") from error
    return tag


def _save(client: docker.DockerClient, tag: str, archive: Path) -> None:
    """`docker save` of `tag` into `archive` (written whole, then renamed); best effort."""
    partial = archive.with_suffix(".partial")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as out:
            for chunk in client.images.get(tag).save(named=True):
                out.write(chunk)
        os.replace(partial, archive)
    except (OSError, docker.errors.DockerException):
        partial.unlink(missing_ok=True)


def _find(client: docker.DockerClient, key: str) -> str | None:
    """The tag of an image labelled with content `key`, if there is one."""
    images = client.images.list(filters={"label": f"{CONTENT_LABEL}={key}"})
    for image in images:
        if image.tags:
            return image.tags[0]
    return None


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _run(argv: Sequence[str], timeout: float) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ProvisionError(f"{argv[0]}: {error}") from error
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ProvisionError(f"{' '.join(argv[:3])}: exit {done.returncode}: "
                             + " / ".join(detail))
    return done.stdout

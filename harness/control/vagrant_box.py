"""The Vagrant box of vagrant/Vagrantfile, for the libvirt provider, built on this machine from
Debian's packages alone (no box registry).

    raw disk     an 8 GiB sparse file, one bootable ext4 partition (a loop device at its
                 offset)
    root         `debootstrap --variant=minbase bookworm` into it, then in a chroot the
                 packages of `BoxRecipe.packages` (a kernel, sshd, ZooKeeper, Java 17,
                 Python, nftables, ...), user `vagrant` with Vagrant's insecure public key
                 and password-less sudo, host keys made at first boot, eth0 on DHCP
    boot         GRUB (i386-pc: boot code in the MBR, `grub-mkimage`'s core image after it)
                 and a grub.cfg of our own: root by UUID, serial
                 console, `net.ifnames=0` (eth0, eth1 as Vagrant's Debian guest expects)
    box          box.img (`qemu-img convert` to qcow2), metadata.json, a Vagrantfile and
                 `kchaos-content`, in a tar: `<cache>/kchaos-bookworm64-<key>.box`

The box is cached by content: `BoxRecipe.key()` hashes everything the build reads, a box
file of that key is reused, and `register_box` runs `vagrant box add` only when the
registered box carries another key. Heavy steps run under `nice -n 19 ionice -c 3`.

    python -m harness.control.vagrant_box [--cache DIR] [--no-register]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.control.errors import ProvisionError

__all__ = ["BOX_NAME", "BoxRecipe", "box_path", "build_box", "ensure_box", "register_box"]

BOX_NAME = "kchaos/bookworm64"
RECIPE_VERSION = 1
PACKAGES = ("linux-image-amd64", "grub-pc-bin", "grub2-common", "systemd-sysv", "udev",
            "openssh-server", "sudo", "ifupdown", "isc-dhcp-client", "iproute2", "python3",
            "python3-venv", "default-jre-headless", "zookeeper", "nftables", "procps")
INSECURE_KEY_GLOB = "/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub"
KERNEL_OPTIONS = "console=ttyS0 net.ifnames=0 biosdevname=0"
LOW_PRIORITY = ("nice", "-n", "19", "ionice", "-c", "3")
CONTENT_FILE = "kchaos-content"
PARTITION_START = 2048 * 512

BOX_VAGRANTFILE = """\
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.driver = "kvm"
    libvirt.disk_bus = "virtio"
  end
end
"""

INTERFACES = """\
auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
"""

HOST_KEYS_UNIT = """\
[Unit]
Description=SSH host keys of this machine (the box ships none)
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

GRUB_CONFIG = """\
set timeout=0
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root {uuid}
linux /vmlinuz root=UUID={uuid} ro {options}
initrd /initrd.img
boot
"""


@dataclass(frozen=True)
class BoxRecipe:
    """Everything a box is built from; `key()` names it."""

    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple[str, ...] = PACKAGES
    disk_gib: int = 8
    insecure_key: str = ""

    @classmethod
    def default(cls) -> BoxRecipe:
        return cls(insecure_key=insecure_public_key())

    def key(self) -> str:
        text = json.dumps({"v": RECIPE_VERSION, **asdict(self), "grub": GRUB_CONFIG,
                           "kernel": KERNEL_OPTIONS, "interfaces": INTERFACES,
                           "hostkeys": HOST_KEYS_UNIT, "vagrantfile": BOX_VAGRANTFILE},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def insecure_public_key() -> str:
    """Vagrant's well-known insecure public key, as Debian's vagrant package ships it."""
    found = sorted(Path("/").glob(INSECURE_KEY_GLOB.lstrip("/")))
    if not found:
        raise ProvisionError("Vagrant's insecure public key was not found "
                             f"({INSECURE_KEY_GLOB}); apt-get install vagrant")
    return found[-1].read_text().strip()


def default_box_cache() -> Path:
    """$KCHAOS_BOX_CACHE, else /var/cache/kchaos/boxes."""
    return Path(os.environ.get("KCHAOS_BOX_CACHE", "/var/cache/kchaos/boxes"))


def box_path(recipe: BoxRecipe, cache: Path) -> Path:
    return cache / f"kchaos-bookworm64-{recipe.key()[:16]}.box"


def ensure_box(recipe: BoxRecipe, cache: Path) -> tuple[Path, bool]:
    """The box file of `recipe`, built unless cached; (path, whether it was built now)."""
    path = box_path(recipe, cache)
    if path.exists():
        return path, False
    build_box(recipe, path)
    return path, True


def build_box(recipe: BoxRecipe, target: Path) -> None:
    """Build the box file `target` (see the module docstring); written whole, then renamed."""
    for tool in ("debootstrap", "sfdisk", "losetup", "mkfs.ext4", "qemu-img"):
        if shutil.which(tool) is None:
            raise ProvisionError(f"{tool} is missing: make vagrant-bootstrap installs it")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="box-", dir=target.parent) as scratch:
        work = Path(scratch)
        raw = work / "disk.raw"
        with open(raw, "wb") as disk:
            disk.truncate(recipe.disk_gib << 30)
        _run(["sfdisk", "-q", str(raw)], input="label: dos\nstart=2048, type=83, bootable\n")
        root = work / "root"
        root.mkdir()
        with _loop_device(raw, PARTITION_START, (recipe.disk_gib << 30) - PARTITION_START) \
                as partition:
            _run(["mkfs.ext4", "-q", "-L", "kchaos-root", partition])
            uuid = _run(["blkid", "-s", "UUID", "-o", "value", partition]).strip()
            with _mounted(partition, root):
                boot_code, core = _install_root(recipe, root, uuid)
        _install_grub(raw, boot_code, core)
        bundle = work / "box"
        bundle.mkdir()
        _run([*LOW_PRIORITY, "qemu-img", "convert", "-O", "qcow2", str(raw),
              str(bundle / "box.img")], timeout=1800)
        raw.unlink()
        (bundle / "metadata.json").write_text(json.dumps(
            {"provider": "libvirt", "format": "qcow2", "virtual_size": recipe.disk_gib}) + "\n")
        (bundle / "Vagrantfile").write_text(BOX_VAGRANTFILE)
        (bundle / CONTENT_FILE).write_text(recipe.key() + "\n")
        partial = work / "box.tar"
        _run([*LOW_PRIORITY, "tar", "-C", str(bundle), "-cf", str(partial), "metadata.json",
              "Vagrantfile", CONTENT_FILE, "box.img"], timeout=1800)
        os.replace(partial, target)


def _install_root(recipe: BoxRecipe, root: Path, uuid: str) -> tuple[bytes, bytes]:
    """Debian in `root` (see the module docstring); returns GRUB's boot sector code and
    core image for the MBR and the gap after it."""
    _run([*LOW_PRIORITY, "debootstrap", "--variant=minbase", recipe.suite, str(root),
          recipe.mirror], timeout=3600)
    policy = root / "usr/sbin/policy-rc.d"  # no service starts inside the chroot
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    (root / "etc/kernel-img.conf").write_text("do_symlinks = yes\nlink_in_boot = no\n")
    with _chroot_mounts(root):
        apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y"]
        _chroot(root, [*apt, "update"])
        _chroot(root, [*apt, "install", "--no-install-recommends", *recipe.packages],
                timeout=3600)
        _chroot(root, [*apt, "clean"])
        (root / "boot/grub").mkdir(parents=True, exist_ok=True)
        _chroot(root, ["grub-mkimage", "--format=i386-pc", "--output=/boot/grub/core.img",
                       "--prefix=(hd0,msdos1)/boot/grub", "biosdisk", "part_msdos", "ext2"])
        _chroot(root, ["useradd", "--create-home", "--shell", "/bin/bash", "vagrant"])
        (root / "etc/systemd/system/kchaos-host-keys.service").write_text(HOST_KEYS_UNIT)
        _chroot(root, ["systemctl", "enable", "kchaos-host-keys.service"])
    policy.unlink()
    shutil.copytree(root / "usr/lib/grub/i386-pc", root / "boot/grub/i386-pc")
    core = (root / "boot/grub/core.img").read_bytes()
    boot_code = (root / "usr/lib/grub/i386-pc/boot.img").read_bytes()
    (root / "boot/grub/grub.cfg").write_text(GRUB_CONFIG.format(uuid=uuid,
                                                                options=KERNEL_OPTIONS))
    (root / "etc/fstab").write_text(f"UUID={uuid} / ext4 errors=remount-ro 0 1\n")
    (root / "etc/hostname").write_text("kchaos\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 kchaos\n")
    (root / "etc/network/interfaces").write_text(INTERFACES)
    (root / "etc/sudoers.d/vagrant").write_text("vagrant ALL=(ALL) NOPASSWD: ALL\n")
    (root / "etc/sudoers.d/vagrant").chmod(0o440)
    ssh = root / "home/vagrant/.ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "authorized_keys").write_text(recipe.insecure_key + "\n")
    (ssh / "authorized_keys").chmod(0o600)
    _run(["chroot", str(root), "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"])
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)
    return boot_code, core


def _install_grub(raw: Path, boot_code: bytes, core: bytes) -> None:
    """GRUB's boot code into the MBR (before its partition table) and its core image into
    the sectors before the partition, where the boot code looks for it (sector 1)."""
    if len(core) > PARTITION_START - 512:
        raise ProvisionError(f"GRUB's core image ({len(core)} bytes) does not fit before the "
                             "partition")
    with open(raw, "r+b") as disk:
        disk.write(boot_code[:440])
        disk.seek(512)
        disk.write(core)


def register_box(path: Path, name: str = BOX_NAME) -> bool:
    """`vagrant box add` the box file unless the registered `name` has its content key;
    True when it was added now. The libvirt storage pool's copies of older boxes of that
    name are removed (vagrant-libvirt uploads the new one under a new name)."""
    with tarfile_member(path, CONTENT_FILE) as content:
        key = content.strip()
    registered = vagrant_home() / "boxes" / name.replace("/", "-VAGRANTSLASH-")
    if any((p.read_text().strip() == key) for p in registered.glob(f"*/libvirt/{CONTENT_FILE}")):
        return False
    _run(["vagrant", "box", "add", "--force", "--name", name, str(path)], timeout=1800)
    pool = Path("/var/lib/libvirt/images")  # vagrant-libvirt's copies, named by add time
    for stale in pool.glob(f"{name.replace('/', '-VAGRANTSLASH-')}_vagrant_box_image_*"):
        stale.unlink(missing_ok=True)
    return True


def vagrant_home() -> Path:
    return Path(os.environ.get("VAGRANT_HOME", Path.home() / ".vagrant.d"))


@contextlib.contextmanager
def tarfile_member(archive: Path, member: str) -> Iterator[str]:
    """The text of one member of an uncompressed tar."""
    with tarfile.open(archive) as tar:
        source = tar.extractfile(member)
        if source is None:
            raise ProvisionError(f"{archive}: no {member}")
        yield source.read().decode()


@contextlib.contextmanager
def _loop_device(image: Path, offset: int, size: int) -> Iterator[str]:
    """A loop device on `size` bytes of `image` from `offset` (a partition: this works on
    kernels without partition tables on loop devices)."""
    device = _run(["losetup", "--find", "--show", f"--offset={offset}",
                   f"--sizelimit={size}", str(image)]).strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)


@contextlib.contextmanager
def _mounted(device: str, point: Path) -> Iterator[None]:
    _run(["mount", device, str(point)])
    try:
        yield
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, check=False)


@contextlib.contextmanager
def _chroot_mounts(root: Path) -> Iterator[None]:
    """/proc, /sys, /dev and /dev/pts of this machine inside `root`, and its resolv.conf."""
    mounted: list[Path] = []
    try:
        for source, kind in (("/proc", "proc"), ("/sys", "sysfs")):
            point = root / source.lstrip("/")
            _run(["mount", "-t", kind, kind, str(point)])
            mounted.append(point)
        for source in ("/dev", "/dev/pts"):
            point = root / source.lstrip("/")
            point.mkdir(exist_ok=True)
            _run(["mount", "--bind", source, str(point)])
            mounted.append(point)
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
        yield
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
        (root / "etc/resolv.conf").unlink(missing_ok=True)


def _chroot(root: Path, argv: Sequence[str], timeout: float = 600) -> str:
    return _run([*LOW_PRIORITY, "chroot", str(root), *argv], timeout=timeout)


def _run(argv: Sequence[str], input: str | None = None, timeout: float = 600) -> str:
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ProvisionError(f"{' '.join(argv[:8])}: {error}") from error
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-8:]
        raise ProvisionError(f"{' '.join(argv[:8])}: exit {done.returncode}: "
                             + " / ".join(detail))
    return done.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.control.vagrant_box",
                                     description="build (or reuse) and register the box")
    parser.add_argument("--cache", type=Path, default=default_box_cache(),
                        help="where box files are kept (default: %(default)s)")
    parser.add_argument("--no-register", action="store_true",
                        help="only build the box file, no `vagrant box add`")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path, built = ensure_box(BoxRecipe.default(), args.cache)
        print(f"box {'built' if built else 'cached'}: {path} "
              f"({time.monotonic() - started:.1f} s)", flush=True)
        if not args.no_register:
            added = register_box(path)
            print(f"vagrant box {BOX_NAME}: {'added' if added else 'already registered'} "
                  f"({time.monotonic() - started:.1f} s)")
    except ProvisionError as error:
        print(f"vagrant box: {error}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`make test-fresh`: the bootstrap and a smoke tier on a clean Debian 12, in a container.

A dockerd of our own (`PrivateDaemon`: own data root, no iptables) imports a
`debootstrap --variant=minbase bookworm` root built from Debian's packages (`ensure_base`).
A container of it gets a clean clone of this checkout's HEAD (not the work tree: no .venv,
no .cache, no uncommitted change), installs `make`, the one tool the README asks for besides
git (and git's ca-certificates), and runs `make bootstrap` as a user would. Then `make
test-unit` and, in a network namespace of its own with loopback only (so nothing the
bootstrap left out can be downloaded late, and no bridge or firewall rule of the run
reaches this machine), a short `kchaos run`. The container holds every capability this machine has.
Only download caches that are checked by content persist between runs (apt's archives, pip's
and Maven's, under /var/cache/kchaos/fresh). The container, the images and the daemon go at
the end, whatever happened.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.control.docker import PrivateDaemon
from harness.control.docker_image import ensure_base

REPOSITORY = Path(__file__).resolve().parents[1]
CACHE = Path("/var/cache/kchaos/fresh")
CHECKOUT = "/root/kchaos"
# This machine's own trusted CAs (a TLS-inspecting proxy on the way to PyPI and Maven
# Central, say): the container trusts them too, as this machine's pip, Maven and Java do.
LOCAL_CAS = "/usr/local/share/ca-certificates"
DEBIAN_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DOWNLOAD_CACHES = {"apt": "/var/cache/apt/archives", "pip": "/root/.cache/pip",
                   "maven": "/root/.m2"}
# Linux's capabilities by number (capability.h) up to the last one Debian 12's dockerd knows,
# for `cap_add`: `privileged` asks for every one the kernel knows, which fails where this
# machine's bounding set lacks one.
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ")

# Services that packages install are not started: the container is no booted machine.
# /proc/sys and /sys become writable, as on a machine (network namespaces set sysctls).
SCRIPT = f"""set -euo pipefail
mount -o remount,rw /proc/sys && mount -o remount,rw /sys
printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
export DEBIAN_FRONTEND=noninteractive
echo "fresh: installing make and ca-certificates"
apt-get update -qq
apt-get install -y -qq --no-install-recommends make ca-certificates >/dev/null
update-ca-certificates >/dev/null
cd {CHECKOUT}
started=$SECONDS
make bootstrap
echo "fresh: bootstrap took $((SECONDS - started)) s"
started=$SECONDS
make test-unit
unshare --net bash -c 'ip link set lo up \\
    && .venv/bin/kchaos run --time-limit {{seconds}} --store /tmp/store'
echo "fresh: smoke tier took $((SECONDS - started)) s"
"""


def clean_clone(destination: Path) -> str:
    """Clone this repository at HEAD into `destination`; returns the commit."""
    commit = _git("rev-parse", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        print(f"fresh: uncommitted changes are not tested, only HEAD {commit[:12]}")
    subprocess.run(["git", "clone", "-q", "--no-checkout", "--no-hardlinks", str(REPOSITORY),
                    str(destination)], check=True)
    subprocess.run(["git", "-C", str(destination), "checkout", "-q", "--detach", commit],
                   check=True)
    return commit


def held_capabilities() -> list[str]:
    """The capabilities in this process's bounding set, by name."""
    status = Path("/proc/self/status").read_text()
    bounding = int(next(line.split()[1] for line in status.splitlines()
                        if line.startswith("CapBnd:")), 16)
    return [name for bit, name in enumerate(CAPABILITIES) if bounding >> bit & 1]


def run(run_seconds: int, timeout: float) -> int:
    """Build the image, run the container to its end, remove all; the container's exit code."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kchaos-fresh-", dir="/var/tmp") as temporary:
        clone = Path(temporary) / "kchaos"
        commit = clean_clone(clone)
        with PrivateDaemon(Path(temporary) / "dockerd") as daemon:
            client = daemon.start()
            started = time.monotonic()
            image = ensure_base(client)
            print(f"fresh: Debian 12 image {image} in {time.monotonic() - started:.0f} s; "
                  f"testing {commit[:12]}", flush=True)
            volumes = {str(clone): {"bind": CHECKOUT, "mode": "rw"}}
            for name, path in DOWNLOAD_CACHES.items():
                (CACHE / name).mkdir(exist_ok=True)
                volumes[str(CACHE / name)] = {"bind": path, "mode": "rw"}
            if Path(LOCAL_CAS).is_dir():
                volumes[LOCAL_CAS] = {"bind": LOCAL_CAS, "mode": "ro"}
            container = client.containers.run(
                image, ["bash", "-c", SCRIPT.format(seconds=run_seconds)], detach=True,
                network_mode="host", cap_add=held_capabilities(), volumes=volumes,
                security_opt=["seccomp=unconfined", "apparmor=unconfined"],
                environment={"LANG": "C.UTF-8", "PIP_CERT": DEBIAN_CA_BUNDLE,
                             "REQUESTS_CA_BUNDLE": DEBIAN_CA_BUNDLE})
            try:
                deadline = time.monotonic() + timeout
                for chunk in container.logs(stream=True, follow=True):
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
                    if time.monotonic() > deadline:
                        print(f"fresh: timed out after {timeout:g} s")
                        return 1
                return int(container.wait(timeout=60)["StatusCode"])
            finally:
                container.remove(force=True)
                print(f"fresh: done in {time.monotonic() - started:.0f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-seconds", type=int, default=10,
                        help="time limit of the smoke `kchaos run` (default 10)")
    parser.add_argument("--timeout", type=float, default=5400,
                        help="give up after this many seconds (default 5400)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("test-fresh: needs root (a dockerd of its own, a container with every capability)",
              file=sys.stderr)
        return 1
    code = run(args.run_seconds, args.timeout)
    print("fresh: PASSED" if code == 0 else f"fresh: FAILED (exit {code})")
    return code


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(REPOSITORY), *argv], capture_output=True,
                          text=True, check=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())

"""Running without root: re-execute inside a user namespace (user, net and mount).

Inside, the process is root over a private network namespace of its own, so the local
backend can create namespaces, veths, a bridge and nft tables there; /run is a fresh tmpfs
(for /run/netns) and the state root stays outside, in the user's runtime directory. All of
it lives only as long as the re-executed process and its children.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from harness.control.errors import PrivilegeError
from harness.control.runstate import default_state_root

__all__ = ["ensure_root", "in_user_namespace"]

MARKER = "KCHAOS_USERNS"
UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--mount"]
NEEDED = ("kchaos needs root for network namespaces, veths, a bridge and nftables: run it "
          "with sudo, or allow unprivileged user namespaces (user.max_user_namespaces > 0, "
          "and kernel.unprivileged_userns_clone=1 where that sysctl exists)")


def in_user_namespace() -> bool:
    return os.environ.get(MARKER) == "1"


def ensure_root(argv: Sequence[str], module: str = "harness.cli") -> None:
    """Return when root; otherwise re-exec `python -m module argv` inside a user namespace
    (does not return), or raise PrivilegeError saying what is needed."""
    if os.geteuid() == 0:
        if in_user_namespace():
            _prepare_namespace()
        return
    if in_user_namespace():
        raise PrivilegeError(f"still not root inside the user namespace; {NEEDED}")
    try:
        probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PrivilegeError(f"{NEEDED} (unshare: {error})") from error
    if probe.returncode != 0:
        raise PrivilegeError(f"{NEEDED} (unshare: {probe.stderr.strip()})")
    env = dict(os.environ, **{MARKER: "1", "KCHAOS_STATE_DIR": str(default_state_root())})
    os.execvpe(UNSHARE[0], [*UNSHARE, "--", sys.executable, "-m", module, *argv], env)


def _prepare_namespace() -> None:
    """Once per namespace: a private /run for /run/netns, and loopback up."""
    if os.environ.get(MARKER + "_READY") == "1":
        return
    for argv in (["mount", "-t", "tmpfs", "kchaos-run", "/run"], ["ip", "link", "set", "lo", "up"]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise PrivilegeError(f"{' '.join(argv)} failed in the user namespace: "
                                 f"{done.stderr.strip()}")
    os.environ[MARKER + "_READY"] = "1"

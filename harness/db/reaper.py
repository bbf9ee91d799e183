"""The reaper: a small detached process started with a cluster, which takes the cluster down
when its owner (the harness) dies without doing so, e.g. after `kill -9` of `kchaos run`.

    python -m harness.db.reaper PREFIX STATE_ROOT

`Cluster.up` starts it (`harness.db.cluster.start_reaper`); it only knows how to take a
run down (`harness.db.cluster.down`).

It polls the run's record every `POLL_SECONDS`: when the record is gone (a normal
teardown) or released (`kchaos cluster up` left the cluster to the user), it exits; when
the recorded owner no longer runs, it does what `kchaos cluster down --run PREFIX` does, on
any backend, and exits. Its log is `<state root>/<prefix>.reaper.log`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from harness.control.backends import RECORD_FILES
from harness.control.runstate import owner_alive
from harness.db.cluster import down

__all__ = ["POLL_SECONDS", "main", "watch"]

POLL_SECONDS = 0.5
log = logging.getLogger(__name__)


def _owner(state_dir: Path) -> tuple[bool, dict | None]:
    """(recorded, owner): whether the run still has a record, and its owner (None: released)."""
    for name in RECORD_FILES:
        try:
            return True, json.loads((state_dir / name).read_text()).get("owner")
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return True, {}
    return False, None


def watch(prefix: str, state_root: Path, poll: float = POLL_SECONDS) -> bool:
    """Wait until the run is gone or released (False), or its owner died (then take the run
    down and return True)."""
    while True:
        recorded, owner = _owner(state_root / prefix)
        if not recorded or owner is None:
            return False
        if owner and not owner_alive(owner):
            log.warning("owner %s of %s is gone: taking the run down", owner, prefix)
            down(prefix, state_root)
            return True
        time.sleep(poll)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s reaper %(process)d: %(message)s")
    prefix, state_root = argv[0], Path(argv[1])
    reaped = watch(prefix, state_root)
    log.info("%s: %s", prefix, "taken down" if reaped else "torn down or released by its owner")
    (state_root / f"{prefix}.reaper.log").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Figures of the docker backend on a private dockerd: image build (cold and cached),
container start, seconds per exec, and `Cluster.up` (3 brokers + 1 ZooKeeper, healthy).

Usage: sudo .venv/bin/python bench/docker_backend.py [--cold] [--execs 100] [--rounds 3].
`--cold` builds the base and system images from nothing (debootstrap + apt, into an empty
image cache); without it they come from the image cache (`docker load`) when present.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness.control.docker import DockerRemote, PrivateDaemon
from harness.control.docker_image import (
    ImageRecipe,
    build_run_image,
    default_image_cache,
    ensure_base,
    ensure_system,
)
from harness.db import Cluster, ClusterSpec

NODES = ("n1", "n2", "n3", "z1")


def timed(what: str, action):
    started = time.monotonic()
    value = action()
    print(f"{what}: {time.monotonic() - started:.2f} s", flush=True)
    return value, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as scratch:
        cache = Path(scratch) / "cache" if args.cold else default_image_cache()
        daemon = PrivateDaemon(Path(scratch) / "dockerd")
        client, _ = timed("dockerd start", daemon.start)
        try:
            recipe = ImageRecipe()
            if args.cold:
                timed("base image, cold (debootstrap + docker import)",
                      lambda: ensure_base(client, recipe))
            timed("system image, " + ("cold (apt layer + save to cache)" if args.cold
                                      else "from the image cache (docker load)"),
                  lambda: ensure_system(client, recipe, cache))
            timed("system image, cached in the daemon (label lookup)",
                  lambda: ensure_system(client, recipe, cache))
            image, _ = timed("run image (kchaos wheel + broker deps)",
                             lambda: build_run_image(client, "kd0000", recipe, cache))
            state = Path(scratch) / "state"
            remote, _ = timed(f"start {len(NODES)} containers", lambda: DockerRemote.provision(
                NODES, base_url=daemon.base_url, image=image, state_root=state))
            try:
                samples = []
                for _ in range(args.execs):
                    started = time.monotonic()
                    remote.exec("n1", ["true"])
                    samples.append(time.monotonic() - started)
                print(f"exec `true`: median {statistics.median(samples) * 1000:.1f} ms, "
                      f"p95 {sorted(samples)[int(len(samples) * 0.95)] * 1000:.1f} ms "
                      f"over {args.execs}", flush=True)
            finally:
                timed("destroy", remote.destroy)
            spec = ClusterSpec(brokers=3, zookeepers=1, backend="docker",
                               options={"base_url": daemon.base_url, "image": image})
            ups, downs = [], []
            for round_number in range(1, args.rounds + 1):
                cluster, seconds = timed(f"round {round_number}: Cluster.up (containers, "
                                         "ZooKeeper, 3 brokers healthy)",
                                         lambda: Cluster.up(spec, state_root=state))
                ups.append(seconds)
                downs.append(timed(f"round {round_number}: down", cluster.down)[1])
            print(f"cluster up on docker (3 brokers, 1 ZooKeeper): median "
                  f"{statistics.median(ups):.2f} s, max {max(ups):.2f} s; down: median "
                  f"{statistics.median(downs):.2f} s")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()

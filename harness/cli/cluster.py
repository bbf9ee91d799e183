"""`kchaos cluster up | status | down`: a cluster on namespaces, SSH hosts or Vagrant VMs.

`up` returns once the cluster is healthy and leaves it running (local backend as root;
without root the cluster lives inside a user namespace only while `up` runs, so `up` then
waits for Ctrl-C; `--backend ssh --inventory FILE` and `--backend vagrant --vagrant-dir
DIR` need no root here, and default to every host of the inventory).
`status` reads the live cluster; `down` removes every cluster that `up` left and every
leftover of a SIGKILLed harness, and is idempotent.
"""

from __future__ import annotations

import argparse
import json
import signal
import struct
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from harness import exit_codes
from harness.control import RemoteError
from harness.control.backends import BackendOptions
from harness.control.inventory import load_inventory, vagrant_inventory
from harness.control.userns import ensure_root, in_user_namespace
from harness.db import Cluster, ClusterSpec, down, recorded_clusters
from harness.db.brokers import metadata
from harness.db.part import DBContext
from harness.db.quorum import describe_quorum
from harness.db.registry import DBS
from harness.db.znodes import read_snapshot
from harness.options import ConfigError, add_arguments, build, declared, layered

__all__ = ["add_backend_arguments", "add_commands", "backend_options", "status_json"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser("cluster", help="bring a cluster up, inspect it, take it down",
                                    description=__doc__.splitlines()[0])
    commands = cluster.add_subparsers(dest="cluster_command", required=True,
                                      parser_class=type(cluster))

    up = commands.add_parser("up", help="start ZooKeeper and brokers; return once healthy")
    up.add_argument("--nodes", type=int, help="brokers (default 5, or the inventory's)")
    up.add_argument("--db", choices=tuple(DBS), default="kchaos",
                    help="which brokers: ours or Apache Kafka (default %(default)s)")
    add_backend_arguments(up)
    seen: set[str] = set()
    for name, kind in DBS.items():
        add_arguments(up.add_argument_group(f"db {name} options"), declared(kind.options), seen)
    up.add_argument("--dir", default="/tmp/kchaos",
                    help="base of the nodes' work directories (default %(default)s)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to become healthy")
    up.add_argument("--json", action="store_true", help="print JSON")
    up.set_defaults(handler=_up)

    status = commands.add_parser("status", help="processes, controller, partitions")
    status.add_argument("--run", metavar="PREFIX", help="which cluster (default: the only one)")
    status.add_argument("--json", action="store_true",
                        help="print JSON (errors too: {\"error\": ...})")
    status.set_defaults(handler=_status)

    take_down = commands.add_parser("down", help="remove clusters and leftovers (idempotent)")
    take_down.add_argument("--run", metavar="PREFIX", help="only this cluster")
    take_down.add_argument("--keep-data", action="store_true",
                           help="keep the nodes' work directories (logs, data)")
    take_down.set_defaults(handler=_down)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `BackendOptions` declares (--backend, --inventory, --vagrant-dir, ...)."""
    add_arguments(parser, declared(BackendOptions))


def backend_options(args: argparse.Namespace) -> BackendOptions:
    """The backend `add_backend_arguments`' flags describe; raises ConfigError when a value
    is wrong or the backend's source of hosts is missing."""
    values = layered(declared(BackendOptions), [("command line", vars(args))])
    return build(BackendOptions, values, "command line")


def _counts(args: argparse.Namespace, backend: BackendOptions) -> tuple[int, int | None]:
    """--nodes and --zookeepers, defaulting to every host of an ssh or vagrant inventory
    (elsewhere, an unset --zookeepers is the db's default: none on KRaft)."""
    given = args.nodes is not None and args.zookeepers is not None
    if given or backend.backend not in ("ssh", "vagrant"):
        return args.nodes or 5, args.zookeepers
    options = backend.spec_options()
    inventory = (load_inventory(options["inventory"]) if backend.backend == "ssh"
                 else vagrant_inventory(options["vagrant_dir"]))
    brokers = len(inventory.with_role("broker"))
    zookeepers = brokers if args.colocate else len(inventory.with_role("zookeeper"))
    return args.nodes or brokers, args.zookeepers or zookeepers


def _up(args: argparse.Namespace) -> int:
    try:
        backend = backend_options(args)
        if backend.backend == "local":
            ensure_root(sys.argv[1:])
        brokers, zookeepers = _counts(args, backend)
        spec = replace(_db_spec(args, backend, brokers, zookeepers), base_dir=args.dir)
    except (ValueError, RemoteError) as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return exit_codes.ERROR
    others = recorded_clusters()
    if others:
        print(f"kchaos cluster up: {_clusters(others)} already up; starting another, so "
              f"cluster status and cluster down will need --run PREFIX to choose",
              file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    started = time.monotonic()
    try:
        cluster = Cluster.up(spec, timeout=args.timeout)
    except (RemoteError, RuntimeError, TimeoutError) as error:
        print(f"kchaos: cluster up failed: {error}", file=sys.stderr)
        return exit_codes.ERROR
    info = cluster.processes()
    if args.json:
        print(json.dumps(info), flush=True)
    else:
        print(f"cluster {cluster.prefix} healthy after {time.monotonic() - started:.1f} s")
        print(f"bootstrap servers: {info['bootstrap_servers']}")
        if info["zookeeper_connect"]:
            print(f"zookeeper connect: {info['zookeeper_connect']}")
        else:
            quorum = _quorum_status(cluster)
            controller = quorum["controller"]
            voters = ", ".join(f"{voter['id']} on {voter['node']}"
                               for voter in quorum["quorum"]["voters"])
            print(f"metadata quorum (KRaft): voters {voters}; active controller "
                  + (f"{controller['id']} on {controller['node']}, epoch "
                     f"{controller['epoch']}" if controller else "none"))
        for node in info["nodes"]:
            pids = " ".join(f"{service}={pid}" for service, pid in node["pids"].items())
            print(f"  {node['name']:<4} {node['address']:<15} {node['role']:<16} {pids}")
        sys.stdout.flush()
    if in_user_namespace():
        print("not root: the cluster lives in a user namespace while this command runs; "
              "Ctrl-C takes it down", file=sys.stderr, flush=True)
        try:
            threading.Event().wait()
        finally:
            cluster.down()
    cluster.detach()
    return 0


def _db_spec(args: argparse.Namespace, backend: BackendOptions, brokers: int,
             zookeepers: int | None) -> ClusterSpec:
    """The cluster the chosen db (`--db` and its options) describes; ConfigError for an
    option of another db, or a value the db refuses."""
    kind = DBS[args.db]
    given = {**vars(args), "zookeepers": zookeepers}
    own = {option.name for option in declared(kind.options)}
    for name, other in DBS.items():
        for option in declared(other.options):
            if option.name not in own and getattr(args, option.name, None) is not None:
                raise ConfigError(f"{option.flag} belongs to db {name}, not --db {args.db}")
    options = build(kind.options, layered(declared(kind.options), [("command line", given)]),
                    "command line")
    try:
        return kind.build(options, DBContext(brokers, backend)).spec
    except ValueError as error:
        raise ConfigError(f"--db {args.db}: {error}") from error


def _clusters(prefixes: list[str]) -> str:
    many = len(prefixes) > 1
    return (f"{len(prefixes)} cluster{'s' if many else ''} ({', '.join(prefixes)}) "
            f"{'are' if many else 'is'}")


def _status(args: argparse.Namespace) -> int:
    try:
        if args.run is None and len(recorded_clusters()) > 1:
            raise LookupError(f"{_clusters(recorded_clusters())} up: name one with --run "
                              f"PREFIX")
        cluster = Cluster.attach(args.run)
    except (LookupError, RemoteError) as error:
        if args.json:
            print(json.dumps({"error": str(error)}))
        else:
            print(f"kchaos: {error}", file=sys.stderr)
        return exit_codes.ERROR
    try:
        status = status_json(cluster)
    finally:
        cluster.broker_set.close()
    if args.json:
        print(json.dumps(status))
        return 0
    controller = status["controller"]
    print(f"cluster {status['prefix']}  bootstrap servers: {status['bootstrap_servers']}")
    if "quorum" in status:
        print("metadata quorum (KRaft): active controller "
              + (f"{controller['id']} on {controller['node']}, epoch {controller['epoch']}"
                 if controller else "none"))
        described = status.get("described")
        lags = {r["id"]: r for r in described["voters"]} if described else {}
        for voter in status["quorum"]["voters"]:
            seen = ("DOWN" if not voter["alive"]
                    else f"sees leader {voter['leader_id']} epoch {voter['leader_epoch']}"
                    if voter["leader_id"] is not None else "no quorum state")
            print(f"  voter {voter['id']} on {voter['node']}: {seen}"
                  + (f"; {_lag(lags[voter['id']])}" if voter["id"] in lags else ""))
        if described:
            print(f"  metadata high watermark {described['high_watermark']}; observers: "
                  + (", ".join(f"{r['id']} ({_lag(r)})" for r in described["observers"])
                     or "none") + "; fenced brokers: "
                  + ("not listed by this version" if described["fenced_brokers"] is None
                     else ", ".join(map(str, described["fenced_brokers"])) or "none"))
        else:
            print(f"  DescribeQuorum: {status.get('described_error')}")
    else:
        print("controller: " + (f"broker {controller['broker_id']}, epoch "
                                f"{controller['epoch']}" if controller else "none"))
    for zk in status["zookeepers"]:
        print(f"  {zk['node']:<4} {zk['address']:<15} zookeeper pid {zk['pid']} "
              f"{'alive' if zk['alive'] else 'DOWN'} {zk['mode'] or '-'}")
    unlisted = " (not registered, or fenced)" if "quorum" in status else " (not registered)"
    for broker in status["brokers"]:
        print(f"  {broker['node']:<4} {broker['address']:<15} broker {broker['id']} pid "
              f"{broker['pid']} {'alive' if broker['alive'] else 'DOWN'}"
              f"{'' if broker['registered'] else unlisted}")
    for p in status["partitions"]:
        print(f"  {p['topic']}-{p['partition']}: leader {p['leader']} epoch {p['leader_epoch']} "
              f"isr {p['isr']}")
    if status.get("error"):
        print(f"{'Metadata' if 'quorum' in status else 'ZooKeeper'}: {status['error']}")
    return 0


def _lag(replica: dict[str, Any]) -> str:
    fetched = replica["last_fetch_ms"]
    ago = f", fetched {max(time.time() * 1000 - fetched, 0) / 1000:.1f} s ago" if fetched else ""
    return f"log end {replica['log_end_offset']}, lag {replica['lag']}{ago}"


def status_json(cluster: Cluster) -> dict:
    """What `kchaos cluster status --json` prints."""
    if not cluster.broker_set.launcher.uses_zookeeper:
        return _quorum_status(cluster)
    try:
        snapshot = read_snapshot(cluster.zk)
        error = None
    except Exception as failure:  # kazoo raises many kinds while the ensemble is out
        snapshot, error = None, f"{type(failure).__name__}: {failure}"
    registered = snapshot.brokers if snapshot else frozenset()
    return {
        "prefix": cluster.prefix,
        "bootstrap_servers": cluster.bootstrap_servers,
        "zookeeper_connect": cluster.zookeeper_connect,
        "controller": ({"broker_id": snapshot.controller, "epoch": snapshot.controller_epoch}
                       if snapshot and snapshot.controller is not None else None),
        "brokers": [{"id": cluster.broker_id(n), "node": n,
                     "address": cluster.remote.address(n), "alive": cluster.running(n),
                     "pid": cluster.pid(n), "registered": cluster.broker_id(n) in registered}
                    for n in cluster.brokers],
        "zookeepers": [{"node": n, "address": cluster.remote.address(n),
                        "alive": cluster.running(n, "zookeeper"),
                        "pid": cluster.pid(n, "zookeeper"), "mode": cluster.zookeeper_mode(n)}
                       for n in cluster.zookeepers],
        "partitions": [p.to_json() for p in (snapshot.partitions if snapshot else ())],
        **({"error": error} if error else {}),
    }


def _quorum_status(cluster: Cluster) -> dict:
    """The status of a cluster without ZooKeeper: its metadata quorum as each running
    voter's quorum-state file says (the active controller is the leader of the newest
    epoch) and as DescribeQuorum describes it (high watermark, each voter's lag, observers,
    fenced brokers), and which brokers a running broker's Metadata lists (registered and
    unfenced)."""
    voters = cluster.voter_states()
    quorum = cluster.quorum()
    listed: set[int] = set()
    error = None
    for node in cluster.brokers:
        if not cluster.running(node):
            continue
        try:
            listed = metadata(cluster.remote.address(node))[1]
            break
        except (OSError, ValueError, struct.error) as failure:
            error = f"{node} does not answer Metadata: {failure}"
    return {
        "prefix": cluster.prefix,
        "bootstrap_servers": cluster.bootstrap_servers,
        "metadata": "kraft",
        "controller": ({"id": quorum[0], "node": cluster.voter_node(quorum[0]),
                        "epoch": quorum[1]} if quorum else None),
        "quorum": {"voters": [{"id": cluster.voter_id(node), "node": node,
                               "alive": node in voters,
                               "leader_id": state.leader_id if state else None,
                               "leader_epoch": state.leader_epoch if state else None}
                              for node in cluster.voters
                              for state in [voters.get(node)]]},
        "brokers": [{"id": cluster.broker_id(n), "node": n,
                     "address": cluster.remote.address(n), "alive": cluster.running(n),
                     "pid": cluster.pid(n), "registered": cluster.broker_id(n) in listed}
                    for n in cluster.brokers],
        "zookeepers": [],
        "partitions": [],
        **({"error": error} if error and not listed else {}),
        **_described(cluster.bootstrap_servers),
    }


def _described(bootstrap_servers: str) -> dict[str, Any]:
    """The quorum as DescribeQuorum gives it (`described`), or why it could not
    (`described_error`)."""
    try:
        return {"described": describe_quorum(bootstrap_servers.split(",")).to_json()}
    except ValueError as error:
        return {"described_error": str(error)}


def _down(args: argparse.Namespace) -> int:
    try:
        removed = down(args.run, keep_data=args.keep_data)
    except (RemoteError, ValueError) as error:
        print(f"kchaos: cluster down failed: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"removed {len(removed)} cluster(s)" + (f": {', '.join(removed)}" if removed else ""))
    return 0


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


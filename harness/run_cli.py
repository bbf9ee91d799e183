"""`kchaos run` (a chaos test end to end) and `kchaos check` (re-check a stored run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cluster_cli import add_backend_arguments
from harness.config import ACKS, CLIENTS, ConfigError, TestConfig, load_config
from harness.db.brokers import parse_overrides
from harness.scenarios import SCENARIOS
from harness.store import resolve_run

__all__ = ["add_run_commands"]

INPUT_ERROR = 3
_DEFAULTS = TestConfig()


def add_run_commands(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run a chaos test end to end",
        description="Bring up ZooKeeper and brokers, run the queue workload under faults, heal, "
        "read everything back, check the history and write the report into the store. Exit 0 "
        "valid, 1 anomalies found, 2 unknown, 3 harness or input error. Every option can also "
        "be set in a TOML file (--config); options given here win.")
    run.add_argument("--config", type=Path, metavar="FILE.toml", help="TOML file of options")
    run.add_argument("--name", help=f"test name, the store folder (default {_DEFAULTS.name})")
    add_backend_arguments(run)
    run.add_argument("--nodes", type=int, help=f"brokers (default {_DEFAULTS.nodes})")
    run.add_argument("--zookeepers", type=int,
                     help=f"ZooKeeper nodes (default {_DEFAULTS.zookeepers})")
    run.add_argument("--colocate", action="store_true", default=None,
                     help="run ZooKeeper on the first broker nodes")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help=f"seconds of workload under faults (default {_DEFAULTS.time_limit:g})")
    run.add_argument("--nemesis", metavar="A,B,...",
                     help=f"faults or groups, 'none' for none (default {_DEFAULTS.nemesis})")
    run.add_argument("--nemesis-interval", type=float, metavar="SECONDS",
                     help=f"mean seconds between fault changes "
                          f"(default {_DEFAULTS.nemesis_interval:g})")
    run.add_argument("--scenario", nargs="?", const="list", metavar="NAME",
                     help="a staged scenario instead of random faults; alone, list them")
    run.add_argument("--acks", choices=ACKS, help="producer acks (default all)")
    run.add_argument("--client", choices=CLIENTS, help="Kafka client (default confluent)")
    run.add_argument("--idempotence", action="store_true", default=None,
                     help="idempotent producers")
    run.add_argument("--retries", type=int,
                     help="producer retries (default 0, or unbounded with --idempotence)")
    run.add_argument("--linger-ms", type=int, help="producer linger.ms (default 0)")
    run.add_argument("--keys", type=int, help=f"keys = partitions (default {_DEFAULTS.keys})")
    run.add_argument("--concurrency", type=int,
                     help=f"client threads (default {_DEFAULTS.concurrency})")
    run.add_argument("--rate", type=float,
                     help=f"ops per second over all clients (default {_DEFAULTS.rate:g})")
    run.add_argument("--op-timeout", type=float, metavar="SECONDS",
                     help=f"per-op timeout (default {_DEFAULTS.op_timeout:g})")
    run.add_argument("--recovery-seconds", type=float,
                     help=f"wait after healing (default {_DEFAULTS.recovery_seconds:g})")
    run.add_argument("--final-read-seconds", type=float,
                     help=f"bound on final reads (default {_DEFAULTS.final_read_seconds:g})")
    run.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                     help="a broker property, repeatable (defaults: min.insync.replicas=2, "
                          "unclean.leader.election.enable=false)")
    run.add_argument("--seed", type=int, help="seed of every random choice (default: random, "
                                              "printed)")
    run.add_argument("--store", metavar="DIR", help=f"store folder (default {_DEFAULTS.store})")
    run.add_argument("--spark-master", metavar="URL",
                     help=f"Spark master for the checkers (default {_DEFAULTS.spark_master})")
    run.set_defaults(handler=_run)

    check = commands.add_parser(
        "check", help="re-run the checkers on a stored run",
        description="Check a stored run again (results.json and the report are rewritten). "
        "Exit 0 valid, 1 anomalies found, 2 unknown, 3 input error.")
    check.add_argument("run_dir", type=Path, metavar="STORE_DIR",
                       help="a run folder, a test folder or the store (follows 'latest')")
    check.add_argument("--spark-master", metavar="URL", default=_DEFAULTS.spark_master)
    check.set_defaults(handler=_check)


def _run(args: argparse.Namespace) -> int:
    from harness.control.userns import ensure_root
    from harness.runner import run_test

    if args.scenario == "list":
        for scenario in SCENARIOS.values():
            print(f"{scenario.name}: {scenario.description}")
        return 0
    try:
        overrides = {name: getattr(args, name) for name in (
            "name", "nodes", "zookeepers", "colocate", "time_limit", "nemesis",
            "nemesis_interval", "scenario", "acks", "client", "idempotence", "retries",
            "linger_ms", "keys",
            "concurrency", "rate", "op_timeout", "recovery_seconds", "final_read_seconds",
            "seed", "store", "spark_master", "inventory", "vagrant_dir", "docker_host",
            "docker_image")}
        overrides["backend"] = args.backend if args.backend != "local" else None
        overrides["accept_new_host_keys"] = args.accept_new_host_keys or None
        overrides["install"] = False if args.no_install else None
        overrides["broker_config"] = parse_overrides(args.broker_config) or None
        config = load_config(args.config, overrides)
        if config.scenario is not None and config.scenario not in SCENARIOS:
            raise ConfigError(f"unknown scenario {config.scenario!r}; "
                              f"known: {', '.join(SCENARIOS)} (kchaos run --scenario lists them)")
        if config.nemesis != "none":
            from nemesis.package import expand

            expand(config.nemesis)
    except (ConfigError, ValueError) as error:
        print(f"kchaos run: {error}", file=sys.stderr)
        return INPUT_ERROR
    if config.backend == "local":
        ensure_root(sys.argv[1:])
    return run_test(config).exit_code


def _check(args: argparse.Namespace) -> int:
    from harness.runner import check_run

    try:
        run_dir = resolve_run(args.run_dir)
    except FileNotFoundError as error:
        print(f"kchaos check: {error}", file=sys.stderr)
        return INPUT_ERROR
    return check_run(run_dir, args.spark_master).exit_code

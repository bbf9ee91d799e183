"""Consumer-group rebalance and recovery times, our broker and Apache Kafka side by side.

For each system (`--systems`, default both) it starts three loopback brokers against a
ZooKeeper of its own and plays the storyline of tests/support/group_storyline.py for each
client (`--clients`, default all five), then prints one table: per client and measure,
the seconds of each system in adjacent columns. A storyline that fails keeps what it
measured before failing and its error is listed under the table. Everything started
(ZooKeeper, brokers, consumers) is killed by its id before the script ends, and its
scratch folder removed unless `--keep`.

    .venv/bin/python bench/group_rebalance.py --clients confluent,java --systems kchaos,kafka
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.group_clients import CLIENTS, client_name, unavailable  # noqa: E402
from tests.support.group_storyline import (  # noqa: E402
    SYSTEMS,
    TIMINGS,
    Storyline,
    new_cluster,
    system_unavailable,
)
from tests.support.zookeeper import start_zookeeper  # noqa: E402

Result = tuple[dict[str, float], str | None]


def choices(parser: argparse.ArgumentParser, option: str, text: str, known: tuple[str, ...],
            normalize=lambda name: name) -> list[str]:
    """The comma-separated names of `option`; a parser error names any unknown one."""
    try:
        names = [normalize(name.strip()) for name in text.split(",") if name.strip()]
    except ValueError as error:
        parser.error(f"{option}: {error}")
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        parser.error(f"{option}: unknown {', '.join(unknown) or 'empty list'}; "
                     f"known: {', '.join(known)}")
    return names


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def run_system(system: str, clients: list[str], zookeeper_connect: str,
               directory: Path) -> dict[str, Result]:
    """client -> (timings, error) for one system's cluster."""
    reason = system_unavailable(system)
    if reason is not None:
        return {client: ({}, reason) for client in clients}
    results: dict[str, Result] = {}
    try:
        with new_cluster(system, zookeeper_connect, directory / "cluster") as cluster:
            for client in clients:
                reason = unavailable(client)
                if reason is not None:
                    results[client] = ({}, reason)
                    continue
                print(f"group_rebalance: {system} {client} ...", file=sys.stderr, flush=True)
                storyline = Storyline(cluster, client, directory / client,
                                      f"bench-{client}-{system}")
                try:
                    storyline.run()
                    results[client] = (storyline.timings, None)
                except Exception as error:
                    results[client] = (storyline.timings, first_line(error))
    except Exception as error:
        for client in clients:
            results.setdefault(client, ({}, f"cluster: {first_line(error)}"))
    return results


def table(results: dict[str, dict[str, Result]], clients: list[str],
          systems: list[str]) -> str:
    width = max(map(len, TIMINGS)) + 2
    lines = [f"{'client':<10}{'seconds':<{width}}" + "".join(f"{s:>10}" for s in systems)]
    for client in clients:
        for name in TIMINGS:
            cells = []
            for system in systems:
                value = results[system][client][0].get(name)
                cells.append(f"{value:>10.2f}" if value is not None else f"{'-':>10}")
            lines.append(f"{client:<10}{name:<{width}}" + "".join(cells))
    errors = [f"  {system} {client}: {results[system][client][1]}"
              for system in systems for client in clients if results[system][client][1]]
    if errors:
        lines += ["", "failed or skipped:", *errors]
    lines += ["", *(f"  {name}: {meaning}" for name, meaning in TIMINGS.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated, of {', '.join(CLIENTS)} (default all)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, of {', '.join(SYSTEMS)} (default both)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    clients = choices(parser, "--clients", args.clients, CLIENTS, client_name)
    systems = choices(parser, "--systems", args.systems, SYSTEMS)
    directory = Path(tempfile.mkdtemp(prefix="kchaos-group-rebalance-"))
    zookeeper = start_zookeeper(directory / "zookeeper")
    try:
        results = {system: run_system(system, clients, zookeeper.connect, directory / system)
                   for system in systems}
    finally:
        zookeeper.stop()
        if args.keep:
            print(f"group_rebalance: kept {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(table(results, clients, systems))
    return 0 if all(error is None for per_system in results.values()
                    for _, error in per_system.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

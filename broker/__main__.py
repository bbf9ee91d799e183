"""`python -m broker --config server.properties [--log FILE]`.

Exit codes: 0 after a clean (controlled) shutdown, 1 when the broker cannot start
(duplicate broker.id, ZooKeeper unreachable, listeners not bindable), 2 for a bad
command line or configuration file.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from broker.config import BrokerConfig, ConfigError

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="server.properties file")
    parser.add_argument("--log", help="log file (default: server.log in the first log dir)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    args = parser.parse_args(argv)
    try:
        config = BrokerConfig.from_properties(args.config)
    except ConfigError as exc:
        print(f"broker: configuration error: {exc}", file=sys.stderr)
        return 2
    log_file = Path(args.log) if args.log else config.data_dirs[0] / "server.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=log_file, level=args.log_level, format=LOG_FORMAT)
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    from broker.node import BrokerNode, StartupError

    try:
        return asyncio.run(BrokerNode(config).run())
    except StartupError as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

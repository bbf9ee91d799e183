"""The nftables script every backend loads on a node: its inbound drops, replaced at once."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence

__all__ = ["firewall_rules"]


def firewall_rules(table: str, drop_from: Sequence[str], loss_from: Mapping[str, float],
                   address: Callable[[str], str] | None = None) -> str:
    """An nft script replacing the input chain of `inet <table>`: drop every packet from
    `drop_from`, and from each `loss_from` source with its probability (1 drops all).
    Sources are addresses, or node names that `address` turns into addresses."""
    for source, probability in loss_from.items():
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"loss probability for {source} must be in [0, 1]")

    def resolve(source: str) -> str:
        return source if address is None or _is_address(source) else address(source)

    chain = f"inet {table} input"
    dropped = set(drop_from) | {s for s, p in loss_from.items() if p >= 1.0}
    lines = [f"flush chain {chain}"]
    if dropped:
        lines.append(f"add rule {chain} ip saddr "
                     f"{{ {', '.join(sorted(resolve(s) for s in dropped))} }} drop")
    for source, probability in sorted(loss_from.items()):
        if probability > 0 and source not in dropped:
            lines.append(f"add rule {chain} ip saddr {resolve(source)} "
                         f"numgen random mod 10000 < {round(probability * 10000)} drop")
    return "\n".join(lines) + "\n"


def _is_address(source: str) -> bool:
    try:
        ipaddress.ip_address(source)
    except ValueError:
        return False
    return True

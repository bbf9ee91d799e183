"""The files of a compaction swap, and how a log being opened finishes one a crash
interrupted.

The cleaner (cleaner.py) writes a group's cleaned segment as `.cleaned` files, renames them
to `.swap` (the commit point), deletes the group's other segments, then renames the swap
files over the group's first segment. A `.swap` file is complete by construction (fsynced
before the rename), so `complete_interrupted_swaps` finishes the swap: the segments whose
base offset lies inside its range are deleted, its offset and transaction indexes are
dropped (recovery rebuilds both) and it takes the place of its first segment. Leftover
`.cleaned` files are deleted by the log's stray-file sweep; the old segments are intact.
"""

from __future__ import annotations

import os
from pathlib import Path

from .checkpoints import fsync_dir
from .records import H_BASE, H_DELTA, scan
from .segment import LogSegment, log_file_name, parse_base_offset
from .txn_index import txn_index_path

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "complete_interrupted_swaps"]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def complete_interrupted_swaps(directory: Path) -> None:
    """Finish every swap a crash interrupted (see the module docstring)."""
    swaps = sorted(directory.glob(f"*.log{SWAP_SUFFIX}"))
    for swap in swaps:
        base = parse_base_offset(swap.name.removesuffix(SWAP_SUFFIX))
        if base is None:
            continue
        headers = scan(swap.read_bytes(), verify_crc=False, partial_tail_ok=True)
        end = headers[-1][1][H_BASE] + headers[-1][1][H_DELTA] + 1 if headers else base
        for path in directory.glob("*.log"):
            other = parse_base_offset(path.name)
            if other is not None and base < other < end:
                LogSegment.remove_files(directory, other)
        (directory / f"{base:020d}.index").unlink(missing_ok=True)
        (directory / f"{base:020d}.index{SWAP_SUFFIX}").unlink(missing_ok=True)
        txn_index_path(directory, base).unlink(missing_ok=True)
        (directory / f"{base:020d}.txnindex{SWAP_SUFFIX}").unlink(missing_ok=True)
        os.replace(swap, directory / log_file_name(base))
    if swaps:
        fsync_dir(directory)

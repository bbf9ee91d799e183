"""Kafka's checkpoint text files, written atomically (tmp file, fsync, rename, fsync dir).

Format: a version line `0`, a count line, then one entry per line, fields separated by a
space: `topic partition offset` for `replication-offset-checkpoint` and
`recovery-point-offset-checkpoint`, `epoch start_offset` for `leader-epoch-checkpoint`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import CheckpointError

__all__ = [
    "read_epoch_checkpoint",
    "read_offset_checkpoint",
    "write_epoch_checkpoint",
    "write_offset_checkpoint",
]

VERSION = 0


def write_lines(path: Path, entries: list[str]) -> None:
    """Write a checkpoint atomically: readers see the old file or the new one, never a mix."""
    text = "".join(f"{line}\n" for line in [str(VERSION), str(len(entries)), *entries])
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path, fields: int) -> list[list[str]] | None:
    """Entries of a checkpoint as lists of `fields` strings; None if the file does not exist."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not text ({err})") from None
    if not lines or lines[0].strip() != str(VERSION):
        found = lines[0] if lines else "an empty file"
        raise CheckpointError(f"{path}:1: expected version {VERSION}, found {found!r}")
    if len(lines) < 2 or not lines[1].strip().isdigit():
        raise CheckpointError(f"{path}:2: expected the entry count")
    count = int(lines[1])
    if len(lines) != count + 2:
        raise CheckpointError(f"{path}: count line says {count} entries, found {len(lines) - 2}")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}:{number}: expected {fields} fields, got {line!r}")
        entries.append(parts)
    return entries


def _int(path: Path, number: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CheckpointError(f"{path}:{number}: {text!r} is not an integer") from None


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    entries = [f"{topic} {partition} {offset}"
               for (topic, partition), offset in sorted(offsets.items())]
    write_lines(path, entries)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; empty if the file does not exist."""
    entries = read_lines(path, 3)
    if entries is None:
        return {}
    return {(topic, _int(path, n, partition)): _int(path, n, offset)
            for n, (topic, partition, offset) in enumerate(entries, start=3)}


def write_epoch_checkpoint(path: Path, entries: list[tuple[int, int]]) -> None:
    write_lines(path, [f"{epoch} {start}" for epoch, start in entries])


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """[(epoch, start offset)] in file order; None if the file does not exist."""
    entries = read_lines(path, 2)
    if entries is None:
        return None
    return [(_int(path, n, epoch), _int(path, n, start))
            for n, (epoch, start) in enumerate(entries, start=3)]

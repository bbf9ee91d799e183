"""Linearizability of whole history files: load, choose a model, split, check, summarise.

The same plan serves the calling process (`check_files`) and Spark
(`checker.spark`): a file becomes a `FileJob` with its partitions, each
partition is checked on its own, and `summarise` folds the partition results
back into one `FileResult` per file, in the JSON shape of `kchaos check-lin`, its
verdict merged by `checker.core.merge_valid`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checker.core import Verdict, merge_valid
from checker.history import Operation, pair_operations
from checker.history.errors import HistoryError
from checker.history.formats import FORMATS, detect_format, read_ops
from checker.lin.models import MODELS
from checker.lin.search import (
    Budget,
    Counterexample,
    PartitionResult,
    check_partition,
    partitions_of,
)

MODEL_NAMES = ("auto", *MODELS)
FORMAT_NAMES = ("auto", *FORMATS)

_MODEL_BY_FORMAT = {"porcupine-etcd": "cas-register", "porcupine-kv": "kv"}


@dataclass
class FileJob:
    """One history file, loaded and split into partitions (or the input error that stopped it)."""

    path: str
    model: str | None = None
    ops: int = 0
    partitions: list[tuple[Hashable, list[Operation]]] = field(default_factory=list)
    error: str | None = None
    load_seconds: float = 0.0


@dataclass
class FileResult:
    path: str
    model: str | None
    ops: int
    partitions: int
    valid: Verdict | None
    seconds: float
    error: str | None
    partition_results: list[PartitionResult]

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "model": self.model,
            "ops": self.ops,
            "partitions": self.partitions,
            "valid": self.valid,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "partition_results": [_partition_json(r) for r in self.partition_results],
        }


def infer_model(fmt: str, operations: Sequence[Operation]) -> str:
    """The model a history's format or functions imply."""
    if fmt in _MODEL_BY_FORMAT:
        return _MODEL_BY_FORMAT[fmt]
    functions = {op.f for op in operations}
    if functions & {"get", "put", "append"}:
        return "kv"
    if "cas" in functions:
        return "cas-register"
    if functions <= {"read", "write"}:
        return "register"
    raise ValueError(f"cannot infer a model from functions {sorted(functions)}; pass --model")


def load_job(path: str, fmt: str = "auto", model: str = "auto") -> FileJob:
    """Read, validate, pair and split one file; an input error is kept, never raised."""
    started = time.monotonic()
    job = FileJob(path=path)
    try:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file")
        resolved_format = detect_format(path) if fmt == "auto" else fmt
        operations = pair_operations(read_ops(path, resolved_format), source=path)
        client_ops = [op for op in operations if op.process != "nemesis"]
        job.model = infer_model(resolved_format, client_ops) if model == "auto" else model
        job.ops = len(client_ops)
        parts = partitions_of(MODELS[job.model], client_ops)
        job.partitions = sorted(parts.items(), key=lambda kv: repr(kv[0]))
    except (HistoryError, OSError, ValueError, KeyError, TypeError, IndexError) as error:
        job.error = str(error)
    job.load_seconds = time.monotonic() - started
    return job


def check_job_partition(model: str, key: Hashable, ops: list[Operation],
                        budget: Budget) -> PartitionResult:
    return check_partition(MODELS[model], ops, key=key, budget=budget)


def summarise(job: FileJob, results: Iterable[PartitionResult], complete: bool) -> FileResult:
    """Fold partition results into the verdict; without `complete`, stop at an invalid one."""
    ordered = sorted(results, key=lambda r: repr(r.partition))
    if not complete:
        cut = next((i for i, r in enumerate(ordered) if r.valid is False), None)
        if cut is not None:
            ordered = ordered[: cut + 1]
    valid = None if job.error else merge_valid(r.valid for r in ordered)
    seconds = job.load_seconds + sum(r.seconds for r in ordered)
    return FileResult(job.path, job.model, job.ops, len(job.partitions), valid, seconds,
                      job.error, ordered)


def check_files(
    paths: Sequence[str],
    *,
    fmt: str = "auto",
    model: str = "auto",
    complete: bool = False,
    budget: Budget | None = None,
    progress: Callable[[FileResult], None] | None = None,
) -> list[FileResult]:
    """Check every file in the calling process."""
    budget = budget or Budget()
    results = []
    for path in paths:
        job = load_job(path, fmt, model)
        partition_results = []
        for key, ops in job.partitions:
            result = check_job_partition(job.model, key, ops, budget)
            partition_results.append(result)
            if result.valid is False and not complete:
                break
        results.append(summarise(job, partition_results, complete))
        if progress:
            progress(results[-1])
    return results


def _partition_json(result: PartitionResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "partition": result.partition,
        "ops": result.ops,
        "valid": result.valid,
        "seconds": round(result.seconds, 6),
        "reason": result.reason,
        "configurations": result.configurations,
    }
    if result.counterexample is not None:
        body["counterexample"] = _counterexample_json(result.counterexample)
    return body


def _counterexample_json(counterexample: Counterexample) -> dict[str, Any]:
    return {
        "prefix": counterexample.prefix,
        "state": counterexample.state,
        "stuck": counterexample.stuck,
        "pending": counterexample.pending,
        "descriptions": {str(k): v for k, v in counterexample.descriptions.items()},
    }

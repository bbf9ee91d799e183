"""The acks checker: what each producer acks level got, against what it promises.

Per acks level ("0", "1", "all"): sends attempted, acknowledged (ok), failed,
unknown (info), lost (committed but never read), lost of those acknowledged,
and duplicated (a value at several offsets). acks=all with
min.insync.replicas >= 2 and unclean leader election off promises that no
acknowledged send is lost: such a loss fails the test. Any other level or
configuration promises nothing: its losses are reported as allowed by the
configuration. The promise is the same in every metadata mode (`checker.modes`); why a
loss is allowed names the mode where it changes what an unclean election is.

Test keys read: `acks` (the level of sends without an `acks` field; default
"all"), `broker_config` ("min.insync.replicas", "unclean.leader.election.enable"),
`final_reads` (default true; false: unseen sends are not counted as lost), `db` and its
options (the metadata mode).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from checker.core import Result, condense
from checker.modes import mode_of
from checker.queue.analysis import (
    AnalysisChecker,
    QueueAnalysis,
    acks_label,
    broker_setting,
    judged,
    promises_no_loss,
    tolerance_reasons,
)

__all__ = ["AcksChecker", "counted_losses"]

NO_LOSS = "no acknowledged loss (acks=all, min.insync.replicas >= 2, unclean election off)"
NO_PROMISE = "none"


def counted_losses(test: Mapping[str, Any], analysis: QueueAnalysis) -> list[dict[str, Any]]:
    """The losses that count (`checker.queue.analysis.judged`): lost writes, and unseen sends when
    the history ends with final reads."""
    final_reads = test.get("final_reads", True) is not False
    return [loss for loss in judged(test, analysis).losses
            if loss["kind"] == "lost-write" or final_reads]


class AcksChecker(AnalysisChecker):
    """Per acks level counts and a verdict against the level's promise."""

    anomaly_types: ClassVar[tuple[str, ...]] = (
        "lost-acknowledged", "lost-allowed-by-configuration")

    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        default = test.get("acks", "all")
        levels: dict[str, dict[str, Any]] = {}

        def level(label: str) -> dict[str, Any]:
            if label not in levels:
                levels[label] = {"attempted": 0, "acknowledged": 0, "failed": 0, "unknown": 0,
                                 "lost": 0, "lost-acknowledged": 0, "duplicated": 0}
            return levels[label]

        for raw, counts in analysis.acks.items():
            into = level(acks_label(raw, default))
            for name, count in counts.items():
                into[name] += count
        broken, tolerated = [], []
        for loss in counted_losses(test, analysis):
            label = acks_label(loss["acks"], default)
            into = level(label)
            into["lost"] += 1
            if loss["status"] == "ok":
                into["lost-acknowledged"] += 1
                witness = {**loss["witness"], "acks": label, "kind": loss["kind"]}
                (broken if promises_no_loss(test, label) else tolerated).append(witness)
        for label, counts in levels.items():
            promise = promises_no_loss(test, label)
            counts["promise"] = NO_LOSS if promise else NO_PROMISE
            if not counts["lost-acknowledged"]:
                counts["verdict"] = "ok"
            else:
                counts["verdict"] = "failed" if promise else "allowed by configuration"
        anomalies = {}
        if broken:
            anomalies["lost-acknowledged"] = condense(sorted(broken, key=_order))
        if tolerated:
            anomalies["lost-allowed-by-configuration"] = condense(sorted(tolerated, key=_order))
        stats = {
            "levels": dict(sorted(levels.items())),
            "config": {
                "acks": acks_label(default),
                "min.insync.replicas": int(broker_setting(test, "min.insync.replicas", 1)),
                "unclean.leader.election.enable":
                    str(broker_setting(test, "unclean.leader.election.enable", False)).lower(),
                "metadata-mode": mode_of(test).name,
            },
        }
        if tolerated:
            stats["allowed-because"] = {"lost-allowed-by-configuration": tolerance_reasons(
                test, ["lost-write"])["lost-write"]}
        return Result(valid=not broken, anomalies=anomalies, stats=stats,
                      allowed=["lost-allowed-by-configuration"] if tolerated else [],
                      seconds=time.monotonic() - started)


def _order(witness: dict[str, Any]) -> tuple:
    return (witness["ops"], repr(witness["key"]))

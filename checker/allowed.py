"""Why an anomaly type a test's configuration allows is allowed, in Kafka's terms: one
reason per type, the table the checkers' `allowed-because` stats, the verdict's headline,
the report and docs/anomalies.md all take their words from.

A checker names the type, and, when a type is allowed for a reason another type stands
for, that type as the `cause` (a poll-skip allowed because the log may be truncated has
lost-write's reason; a G1c at isolation.level=read_uncommitted has precommitted-read's),
with the settings of the test that allow it (`acks=1`). Where the test's metadata mode
(`checker.modes`) changes why a type is allowed, the mode's own reason is given, the mode
named with the settings.
"""

from __future__ import annotations

from checker.modes import KRAFT_ELR, MetadataMode

__all__ = ["ALLOWED_BECAUSE", "ALLOWED_BECAUSE_IN_MODE", "because"]

_LOSS = ("the configuration does not promise that acknowledged writes survive a leader "
         "change: a new leader may lack records the old one acknowledged, and its "
         "followers truncate them")
_WRITE_ORDER = ("every such cycle needs a write-write edge, and Kafka does not order one "
                "transaction's writes against another's: each partition's log order is "
                "not a commit order")
_REBALANCE = ("a consumer-group rebalance moves partitions between consumers, and the new "
              "owner resumes from the group's committed offset, not where the last poll "
              "ended")
_NO_FINAL_READS = ("the history has no final reads, so a record not read yet is not "
                   "known to be lost")

ALLOWED_BECAUSE: dict[str, str] = {
    "int-send-skip": ("Kafka interleaves concurrent transactions' records in a partition, so "
                      "one transaction's sends to a key need not get consecutive offsets"),
    "G0": ("Kafka does not order one transaction's writes against another's: two "
           "transactions may append to two partitions in opposite orders"),
    "G1b": ("a poll may end inside a committed transaction's records (max.poll.records), "
            "so it reads part of that transaction"),
    "G1c": _WRITE_ORDER,
    "G-single": _WRITE_ORDER,
    "G2": _WRITE_ORDER,
    "G1a": ("consumers at isolation.level=read_uncommitted read records of aborted "
            "transactions"),
    "precommitted-read": ("consumers at isolation.level=read_uncommitted read records of "
                          "transactions that have not committed yet"),
    "duplicate": ("the producer is not idempotent (enable.idempotence=false): a send it "
                  "retries after a lost answer may be appended twice"),
    "lost-write": _LOSS,
    "unseen": _LOSS,
    "inconsistent-offsets": _LOSS,
    "nonmonotonic-send": _LOSS,
    "lost-allowed-by-configuration": _LOSS,
    "clean-election-loss": _LOSS,
    "unclean-election-loss": ("unclean.leader.election.enable=true lets a replica outside "
                              "the ISR become leader, and the records it lacks are "
                              "truncated from the others"),
    "nonlinearizable": ("the configuration does not promise that acknowledged writes "
                        "survive a leader change, so the log it gives need not be "
                        "linearizable"),
    "poll-skip": _REBALANCE,
    "nonmonotonic-poll": _REBALANCE,
    "undelivered": _NO_FINAL_READS,
    "eos-loss": _NO_FINAL_READS,
}

# The reasons a metadata mode's elections change (`checker.modes`), in its own words.
ALLOWED_BECAUSE_IN_MODE: dict[MetadataMode, dict[str, str]] = {
    KRAFT_ELR: {
        "unclean-election-loss": (
            "an election takes a live ISR member, else an eligible leader replica (one "
            "that left the ISR as it fell below min.insync.replicas members, and below that "
            "the high watermark does not advance, so it holds every committed record), else "
            "the last known leader; unclean.leader.election.enable=true lets another live "
            "replica become leader only when none of these can, and the records it lacks "
            "are truncated from the others"),
    },
}


def because(kind: str, *settings: str, cause: str | None = None,
            mode: MetadataMode | None = None) -> str:
    """The reason `kind` is allowed: that of `cause` (default: `kind` itself), in `mode`'s
    own words if its elections change that reason, followed by the test's `settings` that
    allow it, if any, and then by the mode whose words they were."""
    reasons_of = cause or kind
    reason = ALLOWED_BECAUSE[reasons_of]
    if mode is not None and reasons_of in ALLOWED_BECAUSE_IN_MODE.get(mode, {}):
        reason = ALLOWED_BECAUSE_IN_MODE[mode][reasons_of]
        settings = (*settings, mode.title)
    return f"{reason} ({', '.join(settings)})" if settings else reason

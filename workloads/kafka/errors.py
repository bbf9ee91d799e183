"""Kafka error classification: which errors prove that nothing happened.

An error that proves the request was rejected before anything was appended is `fail`;
everything else (timeouts, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
network errors, unknown errors) is `info`. A retriable rejection (NOT_ENOUGH_REPLICAS)
after the producer may have retried is `info` too: an earlier attempt that timed out may
have been appended. librdkafka may re-send a message even with retries=0 (after a leader
change it sends it again to the new leader: a Kafka run saw NOT_ENOUGH_REPLICAS from the
new leader for a message the old one had appended), so the confluent client always counts
as retried.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["DEFINITE_FAILURES", "RETRIABLE_DEFINITE", "outcome"]

# Produce/fetch errors that prove nothing was appended (Kafka protocol names; librdkafka
# spells a few differently, both are listed).
DEFINITE_FAILURES = frozenset({
    "NOT_ENOUGH_REPLICAS",
    "INVALID_TOPIC_EXCEPTION", "INVALID_TOPIC",
    "INVALID_REQUIRED_ACKS",
    "INVALID_RECORD", "INVALID_MSG", "INVALID_MSG_SIZE", "CORRUPT_MESSAGE",
    "INVALID_TIMESTAMP", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING",
    "MESSAGE_TOO_LARGE", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE",
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED",
    "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PART",
    "UNSUPPORTED_VERSION", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "POLICY_VIOLATION",
    "_PURGE_QUEUE", "_QUEUE_FULL", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_INVALID_ARG",
    "_MSG_SIZE_TOO_LARGE", "_VALUE_SERIALIZATION", "_KEY_SERIALIZATION",
})
# Definite only when the producer made a single attempt (retries = 0).
RETRIABLE_DEFINITE = frozenset({"NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PARTITION",
                                "UNKNOWN_TOPIC_OR_PART"})

def outcome(error: str, *, retried: bool = False) -> Literal["fail", "info"]:
    """`fail` when the named Kafka error proves the request had no effect, else `info`.

    `retried`: the producer may have sent the request more than once, so a rejection of
    the last attempt says nothing about the earlier ones (only retriable errors repeat).
    """
    name = error.upper()
    if name not in DEFINITE_FAILURES:
        return "info"
    if retried and name in RETRIABLE_DEFINITE:
        return "info"
    return "fail"

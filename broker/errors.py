"""Kafka protocol error codes used by the broker's data plane.

Values are Kafka's (`org.apache.kafka.common.protocol.Errors`); the wire carries the
integer, so these are plain `int` constants grouped in one enum for readable names.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    NETWORK_EXCEPTION = 13
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TRANSACTION_TIMEOUT = 50
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    INVALID_RECORD = 87


class BrokerError(Exception):
    """A request-level failure carrying the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code

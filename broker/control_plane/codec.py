"""Control-plane frames and bodies: encoding and decoding (seeds/002, 控制类请求).

Wire format: Kafka framing. A request is `int32 size` + request header v1 (`api_key int16,
api_version int16, correlation_id int32, client_id string`) + body; a response is `int32 size`
+ `correlation_id int32` + body. API keys are Kafka's: LeaderAndIsr 4, StopReplica 5,
UpdateMetadata 6, ControlledShutdown 7; `api_version` is 1. Bodies use Kafka's primitive types
(big-endian ints, int16-length strings, -1 for a null string, int32-count arrays) in this
documented layout, close to Kafka's v1/v2 schemas:

    PartitionState  = topic string, partition int32, controller_epoch int32, leader int32,
                      leader_epoch int32, isr [int32], zk_version int32, replicas [int32],
                      is_new int8
    Broker          = broker_id int32, host string, port int32, rack nullable string
    LeaderAndIsr    = controller_id int32, controller_epoch int32, broker_epoch int64,
                      [PartitionState], live_leaders [Broker]
    UpdateMetadata  = controller_id int32, controller_epoch int32, broker_epoch int64,
                      [PartitionState], live_brokers [Broker]
    StopReplica     = controller_id int32, controller_epoch int32, broker_epoch int64,
                      delete_partitions int8, [topic string, partition int32]
    ControlledShutdown = broker_id int32, broker_epoch int64
    responses: LeaderAndIsr, StopReplica = error_code int16, [topic, partition, error_code int16]
               UpdateMetadata = error_code int16
               ControlledShutdown = error_code int16, remaining [topic string, partition int32]
"""

from __future__ import annotations

import asyncio
import struct

from broker.control_plane.messages import (
    BrokerEndpoint,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionStateInfo,
    Request,
    Response,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

__all__ = [
    "LEADER_AND_ISR", "STOP_REPLICA", "UPDATE_METADATA", "CONTROLLED_SHUTDOWN", "API_VERSION",
    "MAX_FRAME", "api_key", "encode_request", "decode_request", "encode_response",
    "decode_response", "read_frame",
]

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN = 4, 5, 6, 7
API_VERSION = 1
MAX_FRAME = 64 << 20
CLIENT_ID = "controller"


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> None:
        self.buf += struct.pack(">b", v)

    def int16(self, v: int) -> None:
        self.buf += struct.pack(">h", v)

    def int32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def int64(self, v: int) -> None:
        self.buf += struct.pack(">q", v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
            return
        raw = v.encode()
        self.int16(len(raw))
        self.buf += raw

    def int32s(self, values: tuple[int, ...]) -> None:
        self.int32(len(values))
        self.buf += struct.pack(f">{len(values)}i", *values)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError("truncated control-plane frame")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError("null where the control-plane frame needs a string")
        return value

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        if self.pos + size > len(self.data):
            raise ValueError("truncated control-plane frame")
        value = bytes(self.data[self.pos:self.pos + size]).decode()
        self.pos += size
        return value

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data) - self.pos:
            raise ValueError(f"bad array length {n}")
        return n

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.int32() for _ in range(self.count()))

    def done(self, value):
        """`value`, if the frame was consumed exactly."""
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} bytes left after the control-plane body")
        return value


def _write_state(w: _Writer, s: PartitionStateInfo) -> None:
    w.string(s.topic)
    w.int32(s.partition)
    w.int32(s.controller_epoch)
    w.int32(s.leader)
    w.int32(s.leader_epoch)
    w.int32s(s.isr)
    w.int32(s.zk_version)
    w.int32s(s.replicas)
    w.int8(1 if s.is_new else 0)


def _read_state(r: _Reader) -> PartitionStateInfo:
    return PartitionStateInfo(r.string(), r.int32(), r.int32(), r.int32(), r.int32(),
                              r.int32s(), r.int32(), r.int32s(), bool(r.int8()))


def _write_broker(w: _Writer, b: BrokerEndpoint) -> None:
    w.int32(b.broker_id)
    w.string(b.host)
    w.int32(b.port)
    w.string(b.rack)


def _read_broker(r: _Reader) -> BrokerEndpoint:
    return BrokerEndpoint(r.int32(), r.string(), r.int32(), r.nullable_string())


def _write_partitions(w: _Writer, partitions, errors: dict | None = None) -> None:
    w.int32(len(partitions))
    for topic, partition in partitions:
        w.string(topic)
        w.int32(partition)
        if errors is not None:
            w.int16(errors[(topic, partition)])


def api_key(request: Request) -> int:
    """The Kafka API key of a request type."""
    return {LeaderAndIsrRequest: LEADER_AND_ISR, StopReplicaRequest: STOP_REPLICA,
            UpdateMetadataRequest: UPDATE_METADATA,
            ControlledShutdownRequest: CONTROLLED_SHUTDOWN}[type(request)]


def encode_request(request: Request, correlation_id: int) -> bytes:
    """The whole frame, size prefix included."""
    w = _Writer()
    w.int16(api_key(request))
    w.int16(API_VERSION)
    w.int32(correlation_id)
    w.string(CLIENT_ID)
    match request:
        case ControlledShutdownRequest(broker_id, broker_epoch):
            w.int32(broker_id)
            w.int64(broker_epoch)
        case StopReplicaRequest():
            w.int32(request.controller_id)
            w.int32(request.controller_epoch)
            w.int64(request.broker_epoch)
            w.int8(1 if request.delete_partitions else 0)
            _write_partitions(w, request.partitions)
        case LeaderAndIsrRequest() | UpdateMetadataRequest():
            w.int32(request.controller_id)
            w.int32(request.controller_epoch)
            w.int64(request.broker_epoch)
            w.int32(len(request.partition_states))
            for state in request.partition_states:
                _write_state(w, state)
            brokers = (request.live_leaders if isinstance(request, LeaderAndIsrRequest)
                       else request.live_brokers)
            w.int32(len(brokers))
            for broker in brokers:
                _write_broker(w, broker)
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def decode_request(frame: bytes) -> tuple[int, Request]:
    """(correlation_id, request) from a frame without its size prefix; ValueError if bad."""
    r = _Reader(frame)
    key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
    r.nullable_string()
    if api_version != API_VERSION:
        raise ValueError(f"unsupported control-plane api_version {api_version}")
    if key == CONTROLLED_SHUTDOWN:
        return r.done((correlation_id, ControlledShutdownRequest(r.int32(), r.int64())))
    if key not in (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA):
        raise ValueError(f"unsupported control-plane api_key {key}")
    controller_id, controller_epoch, broker_epoch = r.int32(), r.int32(), r.int64()
    if key == STOP_REPLICA:
        delete = bool(r.int8())
        partitions = tuple((r.string(), r.int32()) for _ in range(r.count()))
        return r.done((correlation_id, StopReplicaRequest(controller_id, controller_epoch,
                                                          broker_epoch, delete, partitions)))
    states = tuple(_read_state(r) for _ in range(r.count()))
    brokers = tuple(_read_broker(r) for _ in range(r.count()))
    cls = LeaderAndIsrRequest if key == LEADER_AND_ISR else UpdateMetadataRequest
    return r.done((correlation_id,
                   cls(controller_id, controller_epoch, broker_epoch, states, brokers)))


def encode_response(response: Response, correlation_id: int) -> bytes:
    """The whole frame, size prefix included."""
    w = _Writer()
    w.int32(correlation_id)
    w.int16(response.error_code)
    match response:
        case LeaderAndIsrResponse() | StopReplicaResponse():
            _write_partitions(w, sorted(response.partition_errors), response.partition_errors)
        case ControlledShutdownResponse():
            _write_partitions(w, response.remaining)
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def decode_response(key: int, frame: bytes) -> tuple[int, Response]:
    """(correlation_id, response) to a request of API `key`, from a frame without its size."""
    r = _Reader(frame)
    correlation_id, error_code = r.int32(), r.int16()
    if key == UPDATE_METADATA:
        return r.done((correlation_id, UpdateMetadataResponse(error_code)))
    if key == CONTROLLED_SHUTDOWN:
        remaining = tuple((r.string(), r.int32()) for _ in range(r.count()))
        return r.done((correlation_id, ControlledShutdownResponse(error_code, remaining)))
    errors: dict[tuple[str, int], int] = {}
    for _ in range(r.count()):
        topic, partition = r.string(), r.int32()
        errors[(topic, partition)] = r.int16()
    cls = LeaderAndIsrResponse if key == LEADER_AND_ISR else StopReplicaResponse
    return r.done((correlation_id, cls(error_code, errors)))


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One frame from a stream, without its size prefix; ValueError beyond MAX_FRAME."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if size < 0 or size > MAX_FRAME:
        raise ValueError(f"control-plane frame of {size} bytes")
    return await reader.readexactly(size)

"""The control plane: controller-to-broker requests on their own listener (seeds/002, 控制类请求).

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

A server rejects a request whose controller_epoch is below the highest it has seen with
STALE_CONTROLLER_EPOCH (11) before the handler sees it (seeds/000 "controller_epoch").
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from broker.server.tcp import TcpServer

__all__ = [
    "NONE", "UNKNOWN_SERVER_ERROR", "STALE_CONTROLLER_EPOCH", "NOT_CONTROLLER",
    "STALE_BROKER_EPOCH", "PartitionStateInfo", "BrokerEndpoint", "LeaderAndIsrRequest",
    "UpdateMetadataRequest", "StopReplicaRequest", "ControlledShutdownRequest",
    "LeaderAndIsrResponse", "UpdateMetadataResponse", "StopReplicaResponse",
    "ControlledShutdownResponse", "ControlRequestHandler", "ControlPlaneServer",
    "ControllerChannel", "request_controlled_shutdown", "encode_request", "decode_request",
]

log = logging.getLogger(__name__)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
STALE_CONTROLLER_EPOCH = 11
NOT_CONTROLLER = 41
STALE_BROKER_EPOCH = 77

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN = 4, 5, 6, 7
API_VERSION = 1
MAX_FRAME = 64 << 20
CLIENT_ID = "controller"


@dataclass(frozen=True)
class PartitionStateInfo:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    is_new: bool = False


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionStateInfo, ...]
    live_leaders: tuple[BrokerEndpoint, ...]


@dataclass(frozen=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionStateInfo, ...]
    live_brokers: tuple[BrokerEndpoint, ...]


@dataclass(frozen=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    delete_partitions: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int]


@dataclass(frozen=True)
class UpdateMetadataResponse:
    error_code: int


@dataclass(frozen=True)
class StopReplicaResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int]


@dataclass(frozen=True)
class ControlledShutdownResponse:
    error_code: int
    remaining: tuple[tuple[str, int], ...]


ControlRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
Request = ControlRequest | ControlledShutdownRequest
Response = (LeaderAndIsrResponse | UpdateMetadataResponse | StopReplicaResponse
            | ControlledShutdownResponse)


class ControlRequestHandler(Protocol):
    """What a broker's data plane does with controller requests (error codes as Kafka's)."""

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> dict[tuple[str, int], int]: ...
    async def update_metadata(self, request: UpdateMetadataRequest) -> int: ...
    async def stop_replica(self, request: StopReplicaRequest) -> dict[tuple[str, int], int]: ...


ControlledShutdownCallback = Callable[[int, int], Awaitable[tuple[int, list[tuple[str, int]]]]]


# -- codec ---------------------------------------------------------------------------------

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

    def string(self) -> str | None:
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
    return BrokerEndpoint(r.int32(), r.string(), r.int32(), r.string())


def _write_partitions(w: _Writer, partitions, errors: dict | None = None) -> None:
    w.int32(len(partitions))
    for topic, partition in partitions:
        w.string(topic)
        w.int32(partition)
        if errors is not None:
            w.int16(errors[(topic, partition)])


def _api_key(request: Request) -> int:
    return {LeaderAndIsrRequest: LEADER_AND_ISR, StopReplicaRequest: STOP_REPLICA,
            UpdateMetadataRequest: UPDATE_METADATA,
            ControlledShutdownRequest: CONTROLLED_SHUTDOWN}[type(request)]


def encode_request(request: Request, correlation_id: int) -> bytes:
    """The whole frame, size prefix included."""
    w = _Writer()
    w.int16(_api_key(request))
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
    api_key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
    r.string()
    if api_version != API_VERSION:
        raise ValueError(f"unsupported control-plane api_version {api_version}")
    if api_key == CONTROLLED_SHUTDOWN:
        return correlation_id, ControlledShutdownRequest(r.int32(), r.int64())
    if api_key not in (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA):
        raise ValueError(f"unsupported control-plane api_key {api_key}")
    controller_id, controller_epoch, broker_epoch = r.int32(), r.int32(), r.int64()
    if api_key == STOP_REPLICA:
        delete = bool(r.int8())
        partitions = tuple((r.string(), r.int32()) for _ in range(r.count()))
        return correlation_id, StopReplicaRequest(controller_id, controller_epoch, broker_epoch,
                                                  delete, partitions)
    states = tuple(_read_state(r) for _ in range(r.count()))
    brokers = tuple(_read_broker(r) for _ in range(r.count()))
    cls = LeaderAndIsrRequest if api_key == LEADER_AND_ISR else UpdateMetadataRequest
    return correlation_id, cls(controller_id, controller_epoch, broker_epoch, states, brokers)


def encode_response(response: Response, correlation_id: int) -> bytes:
    w = _Writer()
    w.int32(correlation_id)
    w.int16(response.error_code)
    match response:
        case LeaderAndIsrResponse() | StopReplicaResponse():
            _write_partitions(w, sorted(response.partition_errors), response.partition_errors)
        case ControlledShutdownResponse():
            _write_partitions(w, response.remaining)
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def decode_response(api_key: int, frame: bytes) -> tuple[int, Response]:
    r = _Reader(frame)
    correlation_id, error_code = r.int32(), r.int16()
    if api_key == UPDATE_METADATA:
        return correlation_id, UpdateMetadataResponse(error_code)
    if api_key == CONTROLLED_SHUTDOWN:
        remaining = tuple((r.string(), r.int32()) for _ in range(r.count()))
        return correlation_id, ControlledShutdownResponse(error_code, remaining)
    errors = {}
    for _ in range(r.count()):
        topic, partition = r.string(), r.int32()
        errors[(topic, partition)] = r.int16()
    cls = LeaderAndIsrResponse if api_key == LEADER_AND_ISR else StopReplicaResponse
    return correlation_id, cls(error_code, errors)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if size < 0 or size > MAX_FRAME:
        raise ValueError(f"control-plane frame of {size} bytes")
    return await reader.readexactly(size)


def _partitions_of(request: ControlRequest) -> list[tuple[str, int]]:
    if isinstance(request, StopReplicaRequest):
        return list(request.partitions)
    return [(s.topic, s.partition) for s in request.partition_states]


def _error_response(request: ControlRequest, code: int) -> Response:
    if isinstance(request, UpdateMetadataRequest):
        return UpdateMetadataResponse(code)
    errors = {tp: code for tp in _partitions_of(request)}
    if isinstance(request, LeaderAndIsrRequest):
        return LeaderAndIsrResponse(code, errors)
    return StopReplicaResponse(code, errors)


# -- broker side ---------------------------------------------------------------------------

class ControlPlaneServer(TcpServer):
    """The broker's control-plane listener; one request at a time per connection, in order."""

    def __init__(self, host: str, port: int, handler: ControlRequestHandler,
                 controlled_shutdown: ControlledShutdownCallback | None = None) -> None:
        super().__init__(host, port)
        self.handler = handler
        self.controlled_shutdown = controlled_shutdown
        self.highest_controller_epoch = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                correlation_id, request = decode_request(await _read_frame(reader))
                response = await self._dispatch(request)
                writer.write(encode_response(response, correlation_id))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except ValueError as exc:
            log.warning("closing control-plane connection: %s", exc)

    async def _dispatch(self, request: Request) -> Response:
        if isinstance(request, ControlledShutdownRequest):
            if self.controlled_shutdown is None:
                return ControlledShutdownResponse(NOT_CONTROLLER, ())
            code, remaining = await self.controlled_shutdown(request.broker_id,
                                                             request.broker_epoch)
            return ControlledShutdownResponse(code, tuple(remaining))
        if request.controller_epoch < self.highest_controller_epoch:
            log.warning("rejecting %s from controller %d with stale epoch %d < %d",
                        type(request).__name__, request.controller_id,
                        request.controller_epoch, self.highest_controller_epoch)
            return _error_response(request, STALE_CONTROLLER_EPOCH)
        self.highest_controller_epoch = request.controller_epoch
        try:
            match request:
                case LeaderAndIsrRequest():
                    return LeaderAndIsrResponse(NONE, await self.handler.leader_and_isr(request))
                case UpdateMetadataRequest():
                    return UpdateMetadataResponse(await self.handler.update_metadata(request))
                case StopReplicaRequest():
                    return StopReplicaResponse(NONE, await self.handler.stop_replica(request))
        except Exception:
            log.exception("control request handler failed on %s", type(request).__name__)
            return _error_response(request, UNKNOWN_SERVER_ERROR)
        raise AssertionError("unreachable")


async def request_controlled_shutdown(host: str, port: int, broker_id: int, broker_epoch: int,
                                      timeout: float) -> tuple[int, list[tuple[str, int]]]:
    """Ask the controller at host:port to move leadership off broker_id; (error, still led)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(encode_request(ControlledShutdownRequest(broker_id, broker_epoch), 0))
            await writer.drain()
            _, response = decode_response(CONTROLLED_SHUTDOWN, await _read_frame(reader))
        finally:
            writer.close()
    return response.error_code, list(response.remaining)


# -- controller side -----------------------------------------------------------------------

class _BrokerLink:
    """One connection and one send queue to one broker; requests go out in order, and a
    request is retried on a fresh connection until it is answered or the link is closed."""

    def __init__(self, endpoint: BrokerEndpoint, request_timeout: float, backoff: float) -> None:
        self.endpoint = endpoint
        self.request_timeout, self.backoff = request_timeout, backoff
        self.queue: asyncio.Queue[tuple[ControlRequest, asyncio.Future]] = asyncio.Queue()
        self.correlation_id = 0
        self.task = asyncio.get_running_loop().create_task(self._run())
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _run(self) -> None:
        future: asyncio.Future | None = None
        try:
            while True:
                request, future = await self.queue.get()
                while not future.done():
                    try:
                        response = await self._roundtrip(request)
                    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
                        log.info("control request to broker %d failed (%s); retrying",
                                 self.endpoint.broker_id, e)
                        self._disconnect()
                        await asyncio.sleep(self.backoff)
                        continue
                    if not future.done():
                        future.set_result(response)
        finally:
            self._disconnect()
            pending = [future] if future is not None else []
            while not self.queue.empty():
                pending.append(self.queue.get_nowait()[1])
            for waiting in pending:
                if not waiting.done():
                    waiting.set_exception(ConnectionError(
                        f"broker {self.endpoint.broker_id} removed from the channel"))

    async def _roundtrip(self, request: ControlRequest) -> Response:
        async with asyncio.timeout(self.request_timeout):
            if self._stream is None:
                self._stream = await asyncio.open_connection(self.endpoint.host,
                                                             self.endpoint.port)
            reader, writer = self._stream
            self.correlation_id += 1
            writer.write(encode_request(request, self.correlation_id))
            await writer.drain()
            correlation_id, response = decode_response(_api_key(request),
                                                       await _read_frame(reader))
        if correlation_id != self.correlation_id:
            raise ValueError(f"correlation id {correlation_id} != {self.correlation_id}")
        return response

    def _disconnect(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
            self._stream = None


class ControllerChannel:
    """The controller's connections to the brokers' control-plane listeners."""

    def __init__(self, request_timeout: float = 30.0, backoff: float = 0.2) -> None:
        self.request_timeout, self.backoff = request_timeout, backoff
        self._links: dict[int, _BrokerLink] = {}

    @property
    def broker_ids(self) -> set[int]:
        return set(self._links)

    def add_broker(self, endpoint: BrokerEndpoint) -> None:
        """Open a link to a broker's control-plane endpoint (replacing any previous one)."""
        self.remove_broker(endpoint.broker_id)
        self._links[endpoint.broker_id] = _BrokerLink(endpoint, self.request_timeout,
                                                      self.backoff)

    def remove_broker(self, broker_id: int) -> None:
        link = self._links.pop(broker_id, None)
        if link is not None:
            link.task.cancel()

    def enqueue(self, broker_id: int, request: ControlRequest) -> asyncio.Future:
        """Queue a request; the future gets the response (or ConnectionError)."""
        future = asyncio.get_running_loop().create_future()
        link = self._links.get(broker_id)
        if link is None:
            future.set_exception(ConnectionError(f"no control-plane link to broker {broker_id}"))
        else:
            link.queue.put_nowait((request, future))
        return future

    async def send(self, broker_id: int, request: ControlRequest,
                   timeout: float | None = None) -> Response:
        future = self.enqueue(broker_id, request)
        try:
            return await asyncio.wait_for(future, timeout or self.request_timeout)
        finally:
            if not future.done():
                future.cancel()

    async def close(self) -> None:
        links = list(self._links.values())
        self._links.clear()
        for link in links:
            link.task.cancel()
        await asyncio.gather(*(link.task for link in links), return_exceptions=True)

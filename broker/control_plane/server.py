"""Both ends of the control plane: the broker's listener and the controller's links to it.

A server rejects a request whose controller_epoch is below the highest it has seen with
STALE_CONTROLLER_EPOCH (11) before the handler sees it (seeds/000 "controller_epoch").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from broker.control_plane.codec import (
    CONTROLLED_SHUTDOWN,
    api_key,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_frame,
)
from broker.control_plane.messages import (
    NONE,
    NOT_CONTROLLER,
    STALE_CONTROLLER_EPOCH,
    UNKNOWN_SERVER_ERROR,
    BrokerEndpoint,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    ControlRequest,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    Request,
    Response,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from broker.server.tcp import TcpServer

__all__ = [
    "ControlRequestHandler", "ControlledShutdownCallback", "ControlPlaneServer",
    "ControllerChannel", "request_controlled_shutdown",
]

log = logging.getLogger("broker.control_plane")


class ControlRequestHandler(Protocol):
    """What a broker's data plane does with controller requests (error codes as Kafka's)."""

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> dict[tuple[str, int], int]: ...
    async def update_metadata(self, request: UpdateMetadataRequest) -> int: ...
    async def stop_replica(self, request: StopReplicaRequest) -> dict[tuple[str, int], int]: ...


ControlledShutdownCallback = Callable[[int, int], Awaitable[tuple[int, list[tuple[str, int]]]]]


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
                correlation_id, request = decode_request(await read_frame(reader))
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
            _, response = decode_response(CONTROLLED_SHUTDOWN, await read_frame(reader))
        finally:
            writer.close()
    if not isinstance(response, ControlledShutdownResponse):
        raise ValueError(f"a {type(response).__name__} in answer to ControlledShutdown")
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
            correlation_id, response = decode_response(api_key(request),
                                                       await read_frame(reader))
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

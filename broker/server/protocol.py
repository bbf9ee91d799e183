"""Kafka wire framing: request headers, the table of supported APIs, response encoding.

Bodies are decoded and encoded with kafka-python's generated classes
(`kafka.protocol`, from Kafka's JSON schemas, flexible versions included); the
request header is parsed here with `struct` so that a malformed frame is a
`ProtocolError`, not an exception from deep inside the codec.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

__all__ = [
    "API_VERSIONS_KEY",
    "APIS",
    "Api",
    "ProtocolError",
    "RequestHeader",
    "encode_response",
    "parse_header",
]

API_VERSIONS_KEY = 18


class ProtocolError(Exception):
    """A frame that cannot be parsed; the connection is closed."""


@dataclass(frozen=True)
class Api:
    key: int
    request: type
    response: type
    min_version: int
    max_version: int

    def flexible(self, version: int) -> bool:
        return self.request.flexible_version_q(version)


# Advertised APIs and versions: only what the handlers implement.
APIS: dict[int, Api] = {
    api.key: api
    for api in (
        Api(0, ProduceRequest, ProduceResponse, 0, 9),
        Api(1, FetchRequest, FetchResponse, 4, 12),
        Api(2, ListOffsetsRequest, ListOffsetsResponse, 1, 7),
        Api(3, MetadataRequest, MetadataResponse, 0, 9),
        Api(18, ApiVersionsRequest, ApiVersionsResponse, 0, 3),
        Api(19, CreateTopicsRequest, CreateTopicsResponse, 2, 4),
        Api(22, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        Api(23, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
    )
}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


_HEAD = struct.Struct(">hhih")


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise ProtocolError("tagged field runs past the end of the frame")
    return pos


def _read_uvarint(frame: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(frame) or shift > 28:
            raise ProtocolError("malformed varint in request header")
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def parse_header(frame: memoryview) -> RequestHeader:
    """Parse the request header (v1 or v2). Unknown APIs get a header with no body offset check."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_len = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise ProtocolError("client_id runs past the end of the frame")
        client_id = bytes(frame[pos : pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    elif client_len != -1:
        raise ProtocolError(f"negative client_id length {client_len}")
    api = APIS.get(api_key)
    if (
        api is not None
        and 0 <= api_version <= api.request.max_version
        and api.flexible(api_version)
    ):
        pos = _skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def encode_response(api: Api, version: int, correlation_id: int, response) -> bytes:
    """Frame a response: size, header (v1 if flexible; ApiVersions always v0), body."""
    body = response.encode(version=version)
    flexible = api.flexible(version) and api.key != API_VERSIONS_KEY
    if flexible:
        return struct.pack(">iib", len(body) + 5, correlation_id, 0) + body
    return struct.pack(">ii", len(body) + 4, correlation_id) + body

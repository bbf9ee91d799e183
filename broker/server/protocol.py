"""Kafka wire framing: request headers, the table of supported APIs, response encoding.

Requests are kafka-python's generated classes (`kafka.protocol`, from Kafka's JSON
schemas, flexible versions included). Headers and bodies are decoded strictly by
`broker.server.wire` against those schemas, so a malformed, short or over-long frame is a
`ProtocolError` and never reaches a handler; responses are encoded by kafka-python.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from broker.server.wire import ProtocolError, Reader, decode_body, skip_tagged_fields

__all__ = [
    "API_VERSIONS_KEY",
    "APIS",
    "Api",
    "ProtocolError",
    "RequestHeader",
    "decode_request",
    "encode_response",
    "parse_header",
]

API_VERSIONS_KEY = 18


@dataclass(frozen=True)
class Api:
    key: int
    request: type[ApiMessage]
    response: type[ApiMessage]
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
        Api(8, OffsetCommitRequest, OffsetCommitResponse, 2, 8),
        Api(9, OffsetFetchRequest, OffsetFetchResponse, 1, 8),
        Api(10, FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
        Api(11, JoinGroupRequest, JoinGroupResponse, 0, 9),
        Api(12, HeartbeatRequest, HeartbeatResponse, 0, 4),
        Api(13, LeaveGroupRequest, LeaveGroupResponse, 0, 5),
        Api(14, SyncGroupRequest, SyncGroupResponse, 0, 5),
        Api(15, DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
        Api(16, ListGroupsRequest, ListGroupsResponse, 0, 4),
        Api(18, ApiVersionsRequest, ApiVersionsResponse, 0, 3),
        Api(19, CreateTopicsRequest, CreateTopicsResponse, 2, 4),
        Api(22, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        Api(23, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
        Api(24, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
        Api(25, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
        Api(26, EndTxnRequest, EndTxnResponse, 0, 3),
        Api(27, WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
        Api(28, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
        Api(37, CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
        Api(42, DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    )
}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def parse_header(frame: memoryview) -> RequestHeader:
    """Parse the request header (v1, or v2 with tagged fields for a flexible version of a
    supported API); every length is checked against the frame (`broker.server.wire`)."""
    reader = Reader(frame)
    api_key = reader.int16("api_key")
    api_version = reader.int16("api_version")
    correlation_id = reader.int32("correlation_id")
    client_len = reader.int16("client_id length")
    client_id = None
    if client_len >= 0:
        client_id = str(reader.take(client_len, "client_id"), "utf-8", "replace")
    elif client_len != -1:
        raise ProtocolError(f"negative client_id length {client_len}")
    api = APIS.get(api_key)
    if (
        api is not None
        and 0 <= api_version <= api.request.max_version
        and api.flexible(api_version)
    ):
        skip_tagged_fields(reader, "request header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, reader.pos)


def decode_request(api: Api, header: RequestHeader, frame: memoryview):
    """The request body after `header`; `ProtocolError` unless it fills the frame exactly."""
    return decode_body(api.request, header.api_version, frame[header.body_offset :])


def encode_response(api: Api, version: int, correlation_id: int, response) -> bytes:
    """Frame a response: size, header (v1 if flexible; ApiVersions always v0), body."""
    body = response.encode(version=version)
    flexible = api.flexible(version) and api.key != API_VERSIONS_KEY
    if flexible:
        return struct.pack(">iib", len(body) + 5, correlation_id, 0) + body
    return struct.pack(">ii", len(body) + 4, correlation_id) + body

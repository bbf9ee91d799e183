"""ApiVersions: the APIs and versions this broker implements, with Kafka's v0 fallback."""

from __future__ import annotations

import struct

from kafka.protocol.metadata import ApiVersionsResponse

from broker.errors import ErrorCode
from broker.server.protocol import APIS

__all__ = ["handle", "unsupported_version_response"]


def _api_keys() -> list:
    return [
        ApiVersionsResponse.ApiVersion(
            api_key=api.key, min_version=api.min_version, max_version=api.max_version
        )
        for api in APIS.values()
    ]


async def handle(context, request, version: int, header) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys(), throttle_time_ms=0)


def unsupported_version_response(correlation_id: int) -> bytes:
    """A v0 response with UNSUPPORTED_VERSION listing our versions (KIP-511 fallback)."""
    body = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys()
    ).encode(version=0)
    return struct.pack(">ii", len(body) + 4, correlation_id) + bytes(body)

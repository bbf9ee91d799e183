"""Strict request decoding (`broker.server.wire`), offline: for every advertised API and
version, a request with every field filled decodes as kafka-python decodes it, while every
proper prefix of it, and it with a byte appended, is a `ProtocolError`; hand-made frames
cover null in non-nullable fields, negative lengths, oversized arrays and tagged fields."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from broker.control_plane import codec as control_codec
from broker.control_plane.messages import ControlledShutdownRequest
from broker.server.protocol import APIS, parse_header
from broker.server.wire import ProtocolError, decode_body

VERSIONS = [(api.request, v) for api in APIS.values()
            for v in range(api.min_version, api.max_version + 1)]
SAMPLES = {
    "int8": 1, "int16": 2, "uint16": 3, "int32": 4, "int64": 5, "float64": 0.5, "bool": True,
    "string": "text", "bytes": b"bytes", "records": b"records",
}


def sample(struct_field, version: int, data_class):
    """An instance of `data_class` with every field of `version` set to a non-default value
    (tagged fields included), arrays of two elements."""
    values = {}
    for field in struct_field.fields.values():
        if not field.for_version_q(version):
            continue
        if field.is_struct_array():
            element = field.array_of
            values[field.name] = [sample(element, version, element.data_class)
                                  for _ in range(2)]
        elif field.is_array():
            values[field.name] = [SAMPLES[field.array_of.type_str]] * 2
        elif field.is_struct():
            values[field.name] = sample(field, version, field.data_class)
        else:
            values[field.name] = SAMPLES[field.type_str]
    return data_class(version=version, **values)


def encoded(request_class, version: int) -> bytes:
    return bytes(sample(request_class._struct, version, request_class).encode(version=version))


@pytest.mark.parametrize(("request_class", "version"), VERSIONS,
                         ids=[f"{c.name}-v{v}" for c, v in VERSIONS])
def test_every_advertised_request_decodes_and_every_cut_fails(request_class, version):
    body = encoded(request_class, version)
    assert decode_body(request_class, version, body) == request_class.decode(body,
                                                                             version=version)
    for cut in range(len(body)):
        with pytest.raises(ProtocolError):
            decode_body(request_class, version, body[:cut])
    with pytest.raises(ProtocolError, match="1 bytes left"):
        decode_body(request_class, version, body + b"\x00")


def test_truncated_string_is_refused_where_kafka_python_accepts_it():
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fuzz")]
                           ).encode(version=1)[:-1]
    assert MetadataRequest.decode(body, version=1).topics[0].name == "fuz"
    with pytest.raises(ProtocolError, match="4 bytes at offset 6 but 3 left"):
        decode_body(MetadataRequest, 1, body)


@pytest.mark.parametrize(("version", "body", "message"), [
    (0, b"\xff\xff\xff\xff", "topics: length -1"),  # v0 topics are not nullable
    (1, b"\xff\xff\xff\xfe", "topics: length -2"),
    (1, b"\x00\x00\x00\x01\xff\xff", "name: length -1"),
    (1, b"\x00\x00\x00\x01\xff\xfe", "name: length -2"),
    (1, b"\x7f\xff\xff\xff\x00\x00", "2147483647 elements in 2 bytes"),
    (1, b"\x00\x00\x00\x01\x00\x02\xff\xfe", "not UTF-8"),
    (9, b"\x02\x06fuz", "name of 5 bytes at offset 2 but 3 left"),  # compact: 6 - 1
    (9, b"\x02\x00\x00\x01\x00\x00\x00", "name: length -1"),
    (9, b"\x02\x04fuz\x00\x01\x00\x00\x01\x07\x05ab", "tag 7 of 5 bytes"),
    (9, b"\x02\x04fuz\x00\x01\x00\x00\x02\x07\x00\x03\x00", "tag 3 after tag 7"),
    (9, b"\x02\x04fuz\x00\x01\x00\x00\x7f", "127 tagged fields"),
    (9, b"\x02\x04fuz\x00\x01\x00\x00\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
])
def test_malformed_metadata_bodies(version, body, message):
    with pytest.raises(ProtocolError, match=message):
        decode_body(MetadataRequest, version, body)


def test_unknown_tagged_fields_are_kept_and_checked():
    body = b"\x02\x04fuz\x00\x01\x00\x00\x02\x01\x02ab\x05\x00"
    request = decode_body(MetadataRequest, 9, body)
    assert request.topics[0].name == "fuz"
    assert request.unknown_tags == {"_1": b"ab", "_5": b""}  # the top-level section


def test_known_tagged_field_must_fill_its_declared_size():
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1, topics=[],
                           forgotten_topics_data=[], rack_id="", cluster_id="c1")
    body = bytes(request.encode(version=12))
    assert decode_body(FetchRequest, 12, body).cluster_id == "c1"
    # the top-level tag section ends the body: 01 (one tag), 00 (tag 0), 03 (size), 03 'c' '1'
    assert body.endswith(b"\x01\x00\x03\x03c1")
    for size in (b"\x02", b"\x04"):
        with pytest.raises(ProtocolError):
            decode_body(FetchRequest, 12, body[:-4] + size + body[-3:])


def test_header_lengths_are_checked():
    request = MetadataRequest[9](topics=None, allow_auto_topic_creation=False)
    request.with_header(correlation_id=7, client_id="cid")
    frame = memoryview(bytes(request.encode(header=True)))
    header = parse_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3, 9, 7, "cid")
    for cut in range(header.body_offset):
        with pytest.raises(ProtocolError):
            parse_header(frame[:cut])
    bad_tags = bytes(frame[: header.body_offset - 1]) + b"\x01\x00\x05ab"
    with pytest.raises(ProtocolError, match="tag 0 of 5 bytes"):
        parse_header(memoryview(bad_tags))


def test_control_plane_frames_are_consumed_exactly():
    frame = control_codec.encode_request(ControlledShutdownRequest(3, 7), 11)[4:]
    assert control_codec.decode_request(frame) == (11, ControlledShutdownRequest(3, 7))
    with pytest.raises(ValueError, match="1 bytes left"):
        control_codec.decode_request(frame + b"\x00")
    with pytest.raises(ValueError):
        control_codec.decode_request(frame[:-1])
    response = struct.pack(">ih", 11, 0) + b"\x00"
    with pytest.raises(ValueError, match="1 bytes left"):
        control_codec.decode_response(control_codec.UPDATE_METADATA, response)

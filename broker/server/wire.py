"""Strict decoding of request frames: every length is checked against the bytes present.

kafka-python's decoders keep whatever a slice or `read(n)` returns: a string, bytes field or
unknown tagged field declared longer than the rest of the frame decodes as a shorter value
(a Metadata request cut inside a topic name asked for, and auto-created, `f`, `fu`, `fuz`),
a negative array length other than -1 decodes as an empty array, null is accepted in
non-nullable fields, and bytes left after the body are ignored.

So the broker decodes bodies here, walking kafka-python's schema objects (the structs and
fields it loads from Kafka's JSON message definitions, `request_class._struct`) over a
`Reader` that raises `ProtocolError` on any short read, and builds the same data classes
kafka-python's own decoder does. `ProtocolError` is raised for:

- a fixed-size field, string, bytes, array, struct or varint running past the frame;
- a length below -1, or -1 (null) where the schema does not allow null;
- an array declaring more elements than bytes left (each element takes at least one);
- a varint longer than 5 bytes;
- tagged fields not in increasing tag order, declaring more bytes than are left, or a
  known tagged field whose value does not fill exactly its declared size;
- a string that is not UTF-8;
- bytes left over after the body (`decode_body`).

The request header is read with the same `Reader` (`broker.server.protocol.parse_header`).
"""

from __future__ import annotations

import struct
import uuid

__all__ = ["ProtocolError", "Reader", "decode_body", "skip_tagged_fields"]


class ProtocolError(Exception):
    """A frame that cannot be parsed; the connection is closed."""


_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FIXED = {
    "int8": _INT8,
    "int16": _INT16,
    "uint16": struct.Struct(">H"),
    "int32": _INT32,
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
    "bool": struct.Struct(">?"),
}
_ZERO_UUID = uuid.UUID(int=0)


class Reader:
    """A cursor over `data[pos:end]`; every read past `end` raises `ProtocolError`."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = memoryview(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str = "field") -> memoryview:
        if n < 0 or n > self.end - self.pos:
            raise ProtocolError(
                f"{what} of {n} bytes at offset {self.pos} but {self.end - self.pos} left"
            )
        start = self.pos
        self.pos += n
        return self.data[start : self.pos]

    def unpack(self, fixed: struct.Struct, what: str = "field"):
        return fixed.unpack(self.take(fixed.size, what))[0]

    def int16(self, what: str = "int16") -> int:
        return self.unpack(_INT16, what)

    def int32(self, what: str = "int32") -> int:
        return self.unpack(_INT32, what)

    def uvarint(self, what: str = "varint") -> int:
        value = 0
        for shift in range(0, 35, 7):
            byte = self.take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise ProtocolError(f"{what} longer than 5 bytes at offset {self.pos}")

    def sub(self, n: int, what: str) -> Reader:
        """A reader over the next `n` bytes, which this reader skips."""
        start = self.pos
        self.take(n, what)
        return Reader(self.data, start, self.pos)

    def expect_end(self, what: str) -> None:
        if self.pos != self.end:
            raise ProtocolError(f"{self.end - self.pos} bytes left after the {what}")


def decode_body(request_class, version: int, body: bytes | memoryview):
    """The request `request_class` (a kafka-python `ApiMessage`) at `version` from `body`,
    which it must fill exactly."""
    flexible = request_class.flexible_version_q(version)
    reader = Reader(body)
    request = _struct(request_class._struct, reader, version, flexible, request_class)
    reader.expect_end(f"{request_class.name} v{version} body")
    return request


def skip_tagged_fields(reader: Reader, what: str) -> None:
    """Check and skip a tagged-field section none of whose tags this broker knows."""
    _tagged_fields(reader, {}, 0, what)


def _struct(struct_field, reader: Reader, version: int, flexible: bool, data_class):
    values = {
        field.name: _field(field, reader, version, flexible)
        for field in struct_field.untagged_fields(version)
    }
    if flexible:
        known = {
            field.tag: field
            for field in struct_field.fields.values()
            if field.for_version_q(version) and field.tagged_field_q(version)
        }
        values.update(_tagged_fields(reader, known, version, struct_field.name))
    return data_class(version=version, **values)


def _tagged_fields(reader: Reader, known: dict, version: int, where: str) -> dict:
    count = reader.uvarint(f"{where} tag count")
    if count > reader.remaining // 2:  # a tag and its size take at least a byte each
        raise ProtocolError(f"{where}: {count} tagged fields in {reader.remaining} bytes")
    values = {}
    last = -1
    for _ in range(count):
        tag = reader.uvarint(f"{where} tag")
        if tag <= last:
            raise ProtocolError(f"{where}: tag {tag} after tag {last}")
        last = tag
        size = reader.uvarint(f"{where} tag {tag} size")
        value = reader.sub(size, f"{where} tag {tag}")
        field = known.get(tag)
        if field is None:
            values[f"_{tag}"] = bytes(value.take(size))
        else:
            values[field.name] = _field(field, value, version, True)
            value.expect_end(f"{where} tag {tag} value")
    return values


def _field(field, reader: Reader, version: int, flexible: bool):
    nullable = field.nullable_for_version_q(version)
    if field.is_array():
        return _array(field, reader, version, flexible, nullable)
    if field.is_struct():
        if nullable:
            marker = reader.unpack(_INT8, field.name)
            if marker == -1:
                return None
            if marker != 1:
                raise ProtocolError(f"{field.name}: null marker {marker}")
        return _struct(field, reader, version, flexible, field.data_class)
    return _simple(field.name, field.type_str, reader, flexible, nullable)


def _array(field, reader: Reader, version: int, flexible: bool, nullable: bool):
    length = _length(field.name, reader, flexible, _INT32, nullable)
    if length is None:
        return None
    if length > reader.remaining:  # every element takes at least one byte
        raise ProtocolError(f"{field.name}: {length} elements in {reader.remaining} bytes")
    element = field.array_of
    if field.is_struct_array():
        return [
            _struct(element, reader, version, flexible, element.data_class)
            for _ in range(length)
        ]
    return [
        _simple(field.name, element.type_str, reader, flexible, False) for _ in range(length)
    ]


def _simple(name: str, type_str: str, reader: Reader, flexible: bool, nullable: bool):
    fixed = _FIXED.get(type_str)
    if fixed is not None:
        return reader.unpack(fixed, name)
    if type_str == "string":
        length = _length(name, reader, flexible, _INT16, nullable)
        if length is None:
            return None
        try:
            return str(reader.take(length, name), "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{name}: not UTF-8 ({exc.reason})") from None
    if type_str in ("bytes", "records"):
        length = _length(name, reader, flexible, _INT32, nullable)
        return None if length is None else bytes(reader.take(length, name))
    if type_str == "uuid":
        value = uuid.UUID(bytes=bytes(reader.take(16, name)))
        return None if value == _ZERO_UUID else value  # as kafka-python decodes it
    raise ProtocolError(f"{name}: no strict decoder for type {type_str}")


def _length(name: str, reader: Reader, flexible: bool, fixed: struct.Struct,
            nullable: bool) -> int | None:
    """A length prefix (compact varint of length + 1 if flexible); None for null."""
    length = reader.uvarint(name) - 1 if flexible else reader.unpack(fixed, name)
    if length >= 0:
        return length
    if length == -1 and nullable:
        return None
    raise ProtocolError(f"{name}: length {length} at offset {reader.pos}")

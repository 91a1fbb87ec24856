"""Remoting frames and command headers, without I/O.

A frame on the wire is ``int32 totalLength`` followed by the payload; the
payload is ``int32 (serializeType << 24 | headerLength)``, the header (JSON or
RocketMQ binary), then the body. All integers are big-endian.

Requests are sent with JSON headers, the Java default. Responses are decoded in
either format because a server answers in its own configured format, not in the
request's.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import ProtocolError

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
# RocketMQSerializable fixed part: code, language, version, opaque, flag.
_BINARY_FIXED = struct.Struct(">hbhii")

_LENGTH_FIELD_SIZE = _INT32.size
_HEADER_LENGTH_MASK = 0xFFFFFF
_SERIALIZE_TYPE_SHIFT = 24
_INT16_MAX = 0x7FFF
_INT16_MIN = -0x8000

DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024
"""The broker's own limit (``com.rocketmq.remoting.frameMaxLength``)."""

_SERIALIZE_TYPE_NAMES = {codes.SERIALIZE_JSON: "JSON", codes.SERIALIZE_ROCKETMQ: "ROCKETMQ"}

BodyPart = bytes | memoryview
Body = bytes | tuple[BodyPart, ...]
"""A request's body: bytes, or pieces sent one after another as they are, so that a large send
(a batch of records cut from Arrow buffers) is never joined into one bytes object on its way out."""
Frame = bytes | list[BodyPart]
"""A frame as a connection writes it: whole, or its head and its body's pieces."""


def body_length(body: Body) -> int:
    """The bytes of a body, whole or in pieces."""
    return len(body) if isinstance(body, bytes) else sum(memoryview(part).nbytes for part in body)


def joined(body: Body) -> bytes:
    """A body as one bytes object (where it must be whole: a TLS record, a test's look at it)."""
    return body if isinstance(body, bytes) else b"".join(body)


def _java_string(value: object) -> str:
    """Render a header field as Java's ``toString`` would."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class RemotingCommand:
    """One request or response of the remoting protocol."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = codes.LANGUAGE_PYTHON
    version: int = codes.PROTOCOL_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: int = codes.SERIALIZE_JSON
    body_parts: tuple[BodyPart, ...] = ()  # a request's body in pieces, instead of ``body``

    @property
    def is_response(self) -> bool:
        return bool(self.flag & codes.FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & codes.FLAG_ONEWAY)

    def frame(self, opaque: int) -> Frame:
        """The command's frame, sent with this correlation id: its head and body's pieces when the
        body came in pieces, else one bytes."""
        self.opaque = opaque
        if not self.body_parts:
            return encode_frame(self)
        header = _encode_header(self, self.serialize_type)
        return [_frame_head(self.serialize_type, header, self.body_parts), *self.body_parts]

    @classmethod
    def request(cls, code: int, fields: Mapping[str, object] | None = None, body: Body = b"") -> RemotingCommand:
        """A request whose custom-header fields are stringified like Java's.

        ``makeCustomHeaderToNet`` sends every non-null field as ``toString()``:
        booleans as ``true``/``false``, numbers in decimal; None is left out.
        """
        ext = {} if fields is None else {key: _java_string(value) for key, value in fields.items() if value is not None}
        if isinstance(body, bytes):
            return cls(code=code, ext_fields=ext, body=body)
        return cls(code=code, ext_fields=ext, body_parts=body)


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


# One encoder for every header: json.dumps with options builds a new one per call.
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": cmd.language,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["extFields"] = cmd.ext_fields
    header["serializeTypeCurrentRPC"] = _SERIALIZE_TYPE_NAMES[codes.SERIALIZE_JSON]
    return _JSON_ENCODER.encode(header).encode("utf-8")


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    for name, number in (("code", cmd.code), ("version", cmd.version)):
        if not _INT16_MIN <= number <= _INT16_MAX:
            raise ValueError(f"{name} {number} does not fit the binary header's int16")
    language = codes.LANGUAGE_CODES.get(cmd.language)
    if language is None:
        raise ValueError(f"language {cmd.language!r} has no binary code")
    parts = [_BINARY_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    # Java writes a null or empty remark as length 0.
    remark = (cmd.remark or "").encode("utf-8")
    parts += (_INT32.pack(len(remark)), remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        key_bytes = key.encode("utf-8")
        value_bytes = value.encode("utf-8")
        ext += _INT16.pack(len(key_bytes))
        ext += key_bytes
        ext += _INT32.pack(len(value_bytes))
        ext += value_bytes
    parts += (_INT32.pack(len(ext)), bytes(ext))
    return b"".join(parts)


def encode_frame(cmd: RemotingCommand, *, serialize_type: int | None = None) -> bytes:
    """The complete frame for ``cmd``, including the leading total length.

    ``serialize_type`` overrides ``cmd.serialize_type``.
    """
    kind = cmd.serialize_type if serialize_type is None else serialize_type
    return assemble_frame(kind, _encode_header(cmd, kind), joined(cmd.body_parts) if cmd.body_parts else cmd.body)


def _encode_header(cmd: RemotingCommand, kind: int) -> bytes:
    if kind == codes.SERIALIZE_JSON:
        return _encode_json_header(cmd)
    if kind == codes.SERIALIZE_ROCKETMQ:
        return _encode_binary_header(cmd)
    raise ValueError(f"unknown serialize type {kind}")


def assemble_frame(kind: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame of an encoded header of serialize type ``kind`` and a body, with the leading total
    length: what every request, however its header was made, goes out as."""
    return _frame_head(kind, header, body) + body


def _frame_head(kind: int, header: bytes, body: Body) -> bytes:
    """A frame up to its body: the total length, the serialize type and header length, the header."""
    if len(header) > _HEADER_LENGTH_MASK:
        raise ValueError(f"header of {len(header)} bytes exceeds the 24-bit length field")
    total = _LENGTH_FIELD_SIZE + len(header) + body_length(body)
    return b"".join((_INT32.pack(total), _UINT32.pack(kind << _SERIALIZE_TYPE_SHIFT | len(header)), header))


class Request(Protocol):
    """What a connection sends: a request code and its frame for a given correlation id."""

    code: int

    def frame(self, opaque: int) -> Frame: ...


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


def _json_int(header: Mapping[str, Any], key: str, default: int | None) -> int:
    value = header.get(key, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"JSON header field {key!r} is not an integer: {value!r}")
    return value


def _json_ext_fields(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(f"JSON header extFields is not an object: {type(raw).__name__}")
    ext: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, (dict, list)):
            raise ProtocolError(f"JSON header extFields[{key!r}] is not a scalar")
        ext[key] = value if isinstance(value, str) else _java_string(value)
    return ext


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"broken JSON header: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"JSON header is not an object but {type(obj).__name__}")
    language = obj.get("language", codes.LANGUAGE_DEFAULT_PEER)
    remark = obj.get("remark")
    if not isinstance(language, str):
        raise ProtocolError(f"JSON header field 'language' is not a string: {language!r}")
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError(f"JSON header field 'remark' is not a string: {remark!r}")
    return RemotingCommand(
        code=_json_int(obj, "code", None),
        opaque=_json_int(obj, "opaque", 0),
        flag=_json_int(obj, "flag", 0),
        language=language,
        version=_json_int(obj, "version", 0),
        remark=remark,
        ext_fields=_json_ext_fields(obj.get("extFields")),
        serialize_type=codes.SERIALIZE_JSON,
    )


class _BinaryHeaderReader:
    """Bounds-checked cursor over a RocketMQ binary header."""

    __slots__ = ("_data", "_pos", "_end")

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._pos = 0
        self._end = len(data)

    def _take(self, size: int, what: str) -> int:
        start = self._pos
        if size < 0 or start + size > self._end:
            raise ProtocolError(
                f"binary header truncated reading {what}: need {size} bytes at offset {start}, header has {self._end}"
            )
        self._pos = start + size
        return start

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack_from(self._data, self._take(fmt.size, what))

    def string(self, length_fmt: struct.Struct, what: str) -> str:
        (size,) = self.unpack(length_fmt, f"{what} length")
        start = self._take(size, what)
        try:
            return str(self._data[start : start + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"binary header {what} is not UTF-8: {exc}") from None

    def sub_reader(self, size: int, what: str) -> _BinaryHeaderReader:
        """A reader over the next ``size`` bytes, which this one skips."""
        start = self._take(size, what)
        return _BinaryHeaderReader(self._data[start : start + size])

    @property
    def remaining(self) -> int:
        return self._end - self._pos


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    reader = _BinaryHeaderReader(header)
    code, language, version, opaque, flag = reader.unpack(_BINARY_FIXED, "fixed fields")
    remark = reader.string(_INT32, "remark") or None
    (ext_length,) = reader.unpack(_INT32, "extFields length")
    ext_reader = reader.sub_reader(ext_length, "extFields")
    ext: dict[str, str] = {}
    while ext_reader.remaining:
        key = ext_reader.string(_INT16, "extFields key")
        ext[key] = ext_reader.string(_INT32, "extFields value")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=codes.LANGUAGE_NAMES.get(language, str(language)),
        version=version,
        remark=remark,
        ext_fields=ext,
        serialize_type=codes.SERIALIZE_ROCKETMQ,
    )


def decode_frame(payload: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame given without its leading total-length field.

    Any malformation raises ProtocolError and nothing else.
    """
    view = memoryview(payload)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if len(view) < _LENGTH_FIELD_SIZE:
        raise ProtocolError(f"frame of {len(view)} bytes has no header-length field")
    (word,) = _UINT32.unpack_from(view, 0)
    kind = word >> _SERIALIZE_TYPE_SHIFT
    header_length = word & _HEADER_LENGTH_MASK
    body_start = _LENGTH_FIELD_SIZE + header_length
    if body_start > len(view):
        raise ProtocolError(
            f"header length {header_length} exceeds the frame's "
            f"{len(view) - _LENGTH_FIELD_SIZE} bytes after the length field"
        )
    header = view[_LENGTH_FIELD_SIZE:body_start]
    if kind == codes.SERIALIZE_JSON:
        cmd = _decode_json_header(bytes(header))
    elif kind == codes.SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise ProtocolError(f"unknown header serialize type {kind}")
    cmd.body = bytes(view[body_start:])
    return cmd


class FrameReader:
    """Splits a byte stream into remoting commands.

    Bytes are appended to one bytearray and consumed from its front, which
    CPython does without moving the rest, so large bodies arriving in many
    chunks cost linear time. A framing error poisons the reader: the stream has
    lost sync and every later ``feed`` raises the same error.
    """

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self._max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._failure: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Add received bytes; return every command completed by them."""
        if self._failure is not None:
            raise self._failure
        buffer = self._buffer
        buffer += data
        commands: list[RemotingCommand] = []
        consumed = 0
        try:
            with memoryview(buffer) as view:
                available = len(view)
                while available - consumed >= _LENGTH_FIELD_SIZE:
                    (length,) = _INT32.unpack_from(view, consumed)
                    if length < _LENGTH_FIELD_SIZE or length > self._max_frame_length:
                        raise ProtocolError(
                            f"declared frame length {length} outside "
                            f"[{_LENGTH_FIELD_SIZE}, {self._max_frame_length}] "
                            f"at stream offset {consumed}"
                        )
                    end = consumed + _LENGTH_FIELD_SIZE + length
                    if end > available:
                        break
                    frame = view[consumed + _LENGTH_FIELD_SIZE : end]
                    try:
                        commands.append(decode_frame(frame))
                    finally:
                        frame.release()
                    consumed = end
        except ProtocolError as exc:
            self._failure = exc
            raise
        del buffer[:consumed]
        return commands

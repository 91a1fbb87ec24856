"""Remoting frames: golden bytes, both header formats, errors and the incremental reader."""

from __future__ import annotations

import json
import struct

import pytest

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FrameReader,
    RemotingCommand,
    decode_frame,
    encode_frame,
)
from rocketmq_spark.remoting.errors import ProtocolError

# A GET_MAX_OFFSET request as the client sends it.
JSON_REQUEST_HEADER = (
    b'{"code":30,"language":"PYTHON","version":401,"opaque":7,"flag":0,'
    b'"extFields":{"topic":"TopicA","queueId":"3","committed":"true"},'
    b'"serializeTypeCurrentRPC":"JSON"}'
)
JSON_REQUEST_FRAME = (
    bytes.fromhex("000000A6")  # total length 166 = 4 + 162
    + bytes.fromhex("000000A2")  # serialize type 0 (JSON), header length 162
    + JSON_REQUEST_HEADER
)

# A response in fastjson's shape (keys sorted, language JAVA) with a 3-byte body.
JSON_RESPONSE_HEADER = (
    b'{"code":0,"extFields":{"offset":"5"},"flag":1,"language":"JAVA","opaque":7,'
    b'"remark":"FOUND","serializeTypeCurrentRPC":"JSON","version":479}'
)
JSON_RESPONSE_PAYLOAD = bytes.fromhex("0000008B") + JSON_RESPONSE_HEADER + b"abc"

# The same response with a ROCKETMQ binary header.
BINARY_RESPONSE_FRAME = bytes.fromhex(
    "0000002E"  # total length 46 = 4 + 39 + 3
    "01000027"  # serialize type 1 (ROCKETMQ), header length 39
    "0000"  # code 0
    "00"  # language JAVA
    "01DF"  # version 479
    "00000007"  # opaque 7
    "00000001"  # flag: response
    "00000005"
    "464F554E44"  # remark "FOUND"
    "0000000D"  # extFields length 13
    "0006"
    "6F6666736574"
    "00000001"
    "35"  # offset=5
    "616263"  # body "abc"
)


def test_json_request_frame_golden_bytes() -> None:
    command = RemotingCommand.request(
        codes.RequestCode.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 3, "committed": True, "bname": None}
    )
    command.opaque = 7
    assert len(JSON_REQUEST_HEADER) == 0xA2
    assert encode_frame(command) == JSON_REQUEST_FRAME


def test_request_fields_are_stringified_like_java() -> None:
    command = RemotingCommand.request(
        codes.RequestCode.PULL_MESSAGE,
        {"a": True, "b": False, "c": 0, "d": -12, "e": "x", "f": None, "g": 2**40},
    )
    assert command.ext_fields == {
        "a": "true",
        "b": "false",
        "c": "0",
        "d": "-12",
        "e": "x",
        "g": "1099511627776",
    }
    assert command.language == "PYTHON"
    assert command.version == codes.PROTOCOL_VERSION == 401
    assert not command.is_response and not command.is_oneway
    assert RemotingCommand.request(codes.RequestCode.HEART_BEAT, None, b"{}").ext_fields == {}


def test_json_frame_with_remark_and_body() -> None:
    command = RemotingCommand(
        code=codes.RequestCode.SEND_MESSAGE, opaque=9, flag=codes.FLAG_ONEWAY, remark="é", body=b"hi"
    )
    frame = encode_frame(command)
    (total, word) = struct.unpack_from(">ii", frame)
    header = frame[8 : 4 + 4 + (word & 0xFFFFFF)]
    assert total == len(frame) - 4
    assert json.loads(header)["remark"] == "é"
    assert "é".encode() in header  # UTF-8, not \u escapes
    assert frame.endswith(b"hi")
    decoded = decode_frame(frame[4:])
    assert decoded.is_oneway and not decoded.is_response
    assert decoded == command


def test_json_response_frame_decodes() -> None:
    response = decode_frame(JSON_RESPONSE_PAYLOAD)
    assert response == RemotingCommand(
        code=codes.ResponseCode.SUCCESS,
        opaque=7,
        flag=codes.FLAG_RESPONSE,
        language="JAVA",
        version=479,
        remark="FOUND",
        ext_fields={"offset": "5"},
        body=b"abc",
        serialize_type=codes.SERIALIZE_JSON,
    )
    assert response.is_response


def test_binary_header_frame_decodes() -> None:
    response = decode_frame(BINARY_RESPONSE_FRAME[4:])
    assert response == RemotingCommand(
        code=0,
        opaque=7,
        flag=1,
        language="JAVA",
        version=479,
        remark="FOUND",
        ext_fields={"offset": "5"},
        body=b"abc",
        serialize_type=codes.SERIALIZE_ROCKETMQ,
    )


def test_binary_header_encodes_to_the_golden_bytes() -> None:
    command = RemotingCommand(
        code=0,
        opaque=7,
        flag=1,
        language="JAVA",
        version=479,
        remark="FOUND",
        ext_fields={"offset": "5"},
        body=b"abc",
    )
    assert encode_frame(command, serialize_type=codes.SERIALIZE_ROCKETMQ) == BINARY_RESPONSE_FRAME
    rocketmq_command = RemotingCommand(code=11, serialize_type=codes.SERIALIZE_ROCKETMQ)
    assert encode_frame(rocketmq_command)[4] == codes.SERIALIZE_ROCKETMQ


def test_binary_header_null_remark_and_unknown_language() -> None:
    response = decode_frame(binary_payload(struct.pack(">hbhiiii", 17, 42, 0, 1, 1, 0, 0)))
    assert response.remark is None
    assert response.language == "42"
    assert response.ext_fields == {} and response.body == b""


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_decode_accepts_bytes_like(kind: type) -> None:
    assert decode_frame(kind(JSON_RESPONSE_PAYLOAD)).body == b"abc"


def test_round_trip_both_formats() -> None:
    command = RemotingCommand(
        code=codes.RequestCode.PULL_MESSAGE,
        opaque=123456,
        flag=0,
        remark="r",
        version=401,
        ext_fields={"topic": "Tö", "queueId": "0", "": ""},
        body=bytes(range(256)),
    )
    for kind in (codes.SERIALIZE_JSON, codes.SERIALIZE_ROCKETMQ):
        decoded = decode_frame(encode_frame(command, serialize_type=kind)[4:])
        assert decoded.ext_fields == command.ext_fields
        assert (decoded.code, decoded.opaque, decoded.remark, decoded.body) == (
            command.code,
            command.opaque,
            command.remark,
            command.body,
        )
        assert decoded.serialize_type == kind


def test_encode_rejects_what_the_format_cannot_hold() -> None:
    with pytest.raises(ValueError, match="int16"):
        encode_frame(RemotingCommand(code=40000), serialize_type=codes.SERIALIZE_ROCKETMQ)
    with pytest.raises(ValueError, match="binary code"):
        encode_frame(RemotingCommand(code=1, language="COBOL"), serialize_type=codes.SERIALIZE_ROCKETMQ)
    with pytest.raises(ValueError, match="serialize type"):
        encode_frame(RemotingCommand(code=1), serialize_type=7)
    with pytest.raises(ValueError, match="24-bit"):
        encode_frame(RemotingCommand(code=1, ext_fields={"k": "v" * (1 << 24)}))


def json_payload(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", len(header)) + header + body


def binary_payload(header: bytes) -> bytes:
    return struct.pack(">I", codes.SERIALIZE_ROCKETMQ << 24 | len(header)) + header


# code, language, version, opaque, flag of a binary header.
FIXED = struct.pack(">hbhii", 0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "no header-length field"),
        (b"\x00\x00", "no header-length field"),
        (struct.pack(">I", 100) + b"{}", "header length 100 exceeds"),
        (struct.pack(">I", 2 << 24 | 2) + b"{}", "unknown header serialize type 2"),
        (json_payload(b"{not json"), "broken JSON header"),
        (json_payload(b"\xff\xfe{}"), "broken JSON header"),
        (json_payload(b"[1, 2]"), "not an object"),
        (json_payload(b"{}"), "'code' is not an integer"),
        (json_payload(b'{"code":"0"}'), "'code' is not an integer"),
        (json_payload(b'{"code":true}'), "'code' is not an integer"),
        (json_payload(b'{"code":1.5}'), "'code' is not an integer"),
        (json_payload(b'{"code":0,"opaque":null}'), "'opaque' is not an integer"),
        (json_payload(b'{"code":0,"remark":5}'), "'remark' is not a string"),
        (json_payload(b'{"code":0,"language":1}'), "'language' is not a string"),
        (json_payload(b'{"code":0,"extFields":[]}'), "extFields is not an object"),
        (json_payload(b'{"code":0,"extFields":{"a":{}}}'), "is not a scalar"),
        (json_payload(b"[" * 100_000 + b"]" * 100_000), "broken JSON header"),
        (binary_payload(b"\x00\x01\x00"), "truncated reading fixed fields"),
        (binary_payload(FIXED + struct.pack(">i", 9) + b"abcd"), "truncated reading remark"),
        (binary_payload(FIXED + struct.pack(">i", -1) + b"abcd"), "truncated reading remark"),
        (binary_payload(FIXED + struct.pack(">i", 2) + b"\xff\xfe"), "remark is not UTF-8"),
        (binary_payload(FIXED + struct.pack(">i", 0)), "truncated reading extFields length"),
        (binary_payload(FIXED + struct.pack(">ii", 0, 5) + b"ab"), "truncated reading extFields"),
        (
            binary_payload(FIXED + struct.pack(">iih", 0, 5, 3) + b"abc" + struct.pack(">i", 1) + b"v"),
            "truncated reading extFields value length",
        ),
        (binary_payload(FIXED + struct.pack(">iih", 0, 2, -2)), "truncated reading extFields key"),
    ],
)
def test_malformed_frames_raise_protocol_error(payload: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_frame(payload)


def test_missing_optional_json_fields_take_java_defaults() -> None:
    command = decode_frame(json_payload(b'{"code":3,"extFields":{"n":1,"b":false,"z":null}}'))
    assert command.language == "JAVA"
    assert (command.opaque, command.flag, command.version, command.remark) == (0, 0, 0, None)
    assert command.ext_fields == {"n": "1", "b": "false"}


# --------------------------------------------------------------------------
# FrameReader
# --------------------------------------------------------------------------


def test_reader_byte_by_byte() -> None:
    stream = JSON_REQUEST_FRAME + BINARY_RESPONSE_FRAME
    reader = FrameReader()
    commands = []
    for index in range(len(stream)):
        commands += reader.feed(stream[index : index + 1])
    assert [c.code for c in commands] == [codes.RequestCode.GET_MAX_OFFSET, codes.ResponseCode.SUCCESS]
    assert commands[1].body == b"abc"
    assert reader.buffered == 0


def test_reader_many_frames_in_one_chunk_and_a_partial_tail() -> None:
    frames = [encode_frame(RemotingCommand(code=i, opaque=i, body=bytes(i))) for i in range(10)]
    stream = b"".join(frames)
    reader = FrameReader()
    first = reader.feed(stream[:-3])
    assert [c.opaque for c in first] == list(range(9))
    assert reader.buffered == len(frames[-1]) - 3
    [last] = reader.feed(stream[-3:])
    assert last.body == bytes(9)
    assert reader.buffered == 0


def test_reader_large_body_in_small_chunks() -> None:
    body = bytes(range(256)) * (8 * 1024 * 1024 // 256)
    frame = encode_frame(RemotingCommand(code=0, flag=1, body=body))
    reader = FrameReader()
    chunk = 64 * 1024
    commands = []
    for start in range(0, len(frame), chunk):
        commands += reader.feed(memoryview(frame)[start : start + chunk])
    assert len(commands) == 1 and commands[0].body == body


@pytest.mark.parametrize("length", [0, 3, -1, DEFAULT_MAX_FRAME_LENGTH + 1])
def test_reader_rejects_bad_lengths_before_buffering(length: int) -> None:
    reader = FrameReader()
    with pytest.raises(ProtocolError, match="declared frame length"):
        reader.feed(struct.pack(">i", length))


def test_reader_honours_a_custom_maximum() -> None:
    frame = encode_frame(RemotingCommand(code=0, body=bytes(100)))
    with pytest.raises(ProtocolError, match=r"outside \[4, 64\]"):
        FrameReader(max_frame_length=64).feed(frame)
    assert len(FrameReader(max_frame_length=len(frame)).feed(frame)) == 1


def test_reader_is_poisoned_after_a_framing_error() -> None:
    reader = FrameReader()
    bad = struct.pack(">i", 6) + struct.pack(">I", 2 << 24) + b"xx"
    with pytest.raises(ProtocolError, match="serialize type 2") as first:
        reader.feed(bad)
    with pytest.raises(ProtocolError) as second:
        reader.feed(JSON_REQUEST_FRAME)
    assert second.value is first.value


def test_reader_keeps_frames_decoded_before_an_error_out_of_the_buffer() -> None:
    reader = FrameReader()
    good = encode_frame(RemotingCommand(code=1))
    assert len(reader.feed(good)) == 1
    assert reader.feed(good[:5]) == []
    assert reader.buffered == 5

"""Property-based tests: decoders fed random, truncated or mutated input either succeed or
raise ProtocolError, never anything else, and finish quickly (hypothesis fails any example
slower than the deadline). Set FUZZ_EXAMPLES to run more examples per test than the default."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rocketmq_spark.records.columns import walk_columns
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.records.walk import Message, decode_messages
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import FrameReader, RemotingCommand, decode_frame, encode_frame
from rocketmq_spark.remoting.errors import ProtocolError
from tests.records import COMPRESSORS, PROPERTY_BYTES, inner_message, properties_block, record

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text that can be UTF-8 encoded (no lone surrogates).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)


def decodes_or_protocol_error(payload: bytes) -> RemotingCommand | None:
    try:
        command = decode_frame(payload)
    except ProtocolError:
        return None
    assert isinstance(command, RemotingCommand)
    assert isinstance(command.ext_fields, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext_fields.items())
    return command


def messages_or_protocol_error(body: bytes) -> list[Message] | None:
    try:
        messages = decode_messages(body)
    except ProtocolError:
        return None
    assert all(isinstance(m.body, bytes) and isinstance(m.properties, dict) for m in messages)
    return messages


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    return RemotingCommand(
        code=draw(INT16),
        opaque=draw(INT32),
        flag=draw(st.integers(0, 3)),
        version=draw(INT16),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(st.dictionaries(TEXT, TEXT, max_size=5)),
        body=draw(st.binary(max_size=64)),
    )


SERIALIZE_TYPES = st.sampled_from([codes.SERIALIZE_JSON, codes.SERIALIZE_ROCKETMQ])


# --------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
@example(b"\x00\x00\x00\x02{}")
@example(b"\x01\x00\x00\x00")
def test_random_payloads(payload: bytes) -> None:
    decodes_or_protocol_error(payload)


@FUZZ
@given(commands(), SERIALIZE_TYPES, st.data())
def test_mutated_frames(command: RemotingCommand, kind: int, data: st.DataObject) -> None:
    payload = bytearray(encode_frame(command, serialize_type=kind)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 1))
        payload[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    decodes_or_protocol_error(bytes(payload))
    decodes_or_protocol_error(bytes(payload[:cut]))


@FUZZ
@given(commands(), SERIALIZE_TYPES, st.data())
def test_round_trip_through_reader_at_any_split(command: RemotingCommand, kind: int, data: st.DataObject) -> None:
    stream = encode_frame(command, serialize_type=kind) * 2
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = FrameReader()
    received: list[RemotingCommand] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        received += reader.feed(stream[start:end])
    expected_remark = command.remark or None if kind == codes.SERIALIZE_ROCKETMQ else command.remark
    assert len(received) == 2
    for decoded in received:
        assert (decoded.code, decoded.opaque, decoded.flag, decoded.version) == (
            command.code,
            command.opaque,
            command.flag,
            command.version,
        )
        assert decoded.remark == expected_remark
        assert decoded.ext_fields == command.ext_fields
        assert decoded.body == command.body
    assert reader.buffered == 0


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=10))
def test_reader_on_random_chunks(chunks: list[bytes]) -> None:
    reader = FrameReader(max_frame_length=1 << 16)
    for chunk in chunks:
        try:
            commands_ = reader.feed(chunk)
        except ProtocolError:
            return
        assert all(isinstance(c, RemotingCommand) for c in commands_)


# --------------------------------------------------------------------------
# Message records
# --------------------------------------------------------------------------

HOSTS = st.sampled_from([(bytes([10, 0, 0, 7]), 53412), (bytes(15) + b"\x01", 10911), (bytes([127, 0, 0, 1]), 0)])


@st.composite
def record_bodies(draw: st.DrawFn) -> bytes:
    """A valid PULL body: plain, compressed and inner-batch records."""
    parts = []
    for offset in range(draw(st.integers(1, 4))):
        payload = draw(st.binary(max_size=40))
        kind = draw(st.sampled_from(["plain", "batch", *COMPRESSORS]))
        sys_flag = 0
        if kind in COMPRESSORS:
            compression_type, compress = COMPRESSORS[kind]
            payload = compress(payload)
            sys_flag = codes.MSG_FLAG_COMPRESSED | compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT
        elif kind == "batch":
            payload = b"".join(inner_message(i, payload, properties_block({"UNIQ_KEY": f"u{i}"})) for i in range(3))
            sys_flag = codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP
        parts.append(
            record(
                body=payload,
                sys_flag=sys_flag,
                queue_offset=offset,
                born_host=draw(HOSTS),
                store_host=draw(HOSTS),
                magic=draw(st.sampled_from([codes.MESSAGE_MAGIC_V1, codes.MESSAGE_MAGIC_V2])),
                properties=draw(PROPERTY_BYTES),
            )
        )
    return b"".join(parts)


@FUZZ
@given(st.binary(max_size=400))
def test_random_record_bodies(body: bytes) -> None:
    messages_or_protocol_error(body)


@FUZZ
@given(record_bodies())
def test_valid_record_bodies_decode(body: bytes) -> None:
    messages = decode_messages(body)
    assert messages
    columns = walk_columns(body)
    assert columns.msg_id.to_pylist() == [m.msg_id for m in messages]


@FUZZ
@given(record_bodies(), st.data())
def test_mutated_record_bodies(body: bytes, data: st.DataObject) -> None:
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    messages_or_protocol_error(bytes(mutated))
    messages_or_protocol_error(bytes(mutated[: data.draw(st.integers(0, len(mutated)))]))


@FUZZ
@given(st.lists(PROPERTY_BYTES, min_size=1, max_size=8))
def test_batched_property_parsing_matches_java_rules(blocks: list[bytes]) -> None:
    body = b"".join(record(queue_offset=i, properties=block) for i, block in enumerate(blocks))
    decoded = [m.properties for m in decode_messages(body)]
    assert decoded == [parse_properties(block.decode("utf-8", "replace")) for block in blocks]

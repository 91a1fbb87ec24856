"""Message records of PULL bodies, tag hashing and tag expressions."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import lz4.frame
import pytest
import zstandard

from rocketmq_spark.model import parse_tag_expression
from rocketmq_spark.records.columns import ArrowColumns, walk_columns
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES, ROCKETMQ_DEFAULT_MAX_MESSAGE_BYTES
from rocketmq_spark.records.decoder import decode_pulls
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.records.walk import Message, decode_messages
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import BodyTooLargeError, ProtocolError
from rocketmq_spark.source.rows import BatchBuilder, RowRange
from tests.records import (
    as_python,
    inner_message,
    java_string_hash,
    load_hex,
    properties_block,
    record,
    tag_codes,
    zstd_stream,
)

# --------------------------------------------------------------------------
# Golden records
# --------------------------------------------------------------------------


def test_golden_v1_ipv4_record_from_hex_fixture() -> None:
    [message] = decode_messages(load_hex("record_v1_ipv4.hex"))
    assert message == Message(
        topic="TopicA",
        queue_id=3,
        queue_offset=42,
        commit_log_offset=0x1234,
        sys_flag=0,
        flag=0,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.7:53412",
        store_timestamp=1_700_000_000_123,
        store_host="127.0.0.1:10911",
        reconsume_times=1,
        prepared_transaction_offset=0,
        body="héllo ✓".encode(),
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC11000100002A9F0000000000000001"},
        msg_id="AC11000100002A9F0000000000000001",
        # store ip 7F000001, port 00002A9F, commitlog offset 0000000000001234
        offset_msg_id="7F00000100002A9F0000000000001234",
        tags="TagA",
        keys="k1 k2",
    )


def test_fixture_matches_the_test_builder() -> None:
    built = record(
        body="héllo ✓".encode(),
        properties=properties_block({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC11000100002A9F0000000000000001"}),
        queue_id=3,
        reconsume_times=1,
    )
    fixture = load_hex("record_v1_ipv4.hex")
    # Identical except the bodyCRC, which the fixture sets to 0x12345678.
    assert built[:8] + built[12:] == fixture[:8] + fixture[12:]


def test_v2_magic_reads_a_two_byte_topic_length() -> None:
    topic = b"T" * 200  # longer than a signed byte: why V2 exists
    [message] = decode_messages(record(magic=codes.MESSAGE_MAGIC_V2, topic=topic))
    assert message.topic == "T" * 200
    assert message.body == b"payload"


def test_ipv6_hosts_are_bracketed_and_widen_the_message_id() -> None:
    born_ip = bytes.fromhex("20010db8000000000000000000000001")
    store_ip = bytes(15) + b"\x01"
    [message] = decode_messages(record(born_host=(born_ip, 9876), store_host=(store_ip, 10911), commit_log_offset=7))
    assert message.born_host == "[2001:db8::1]:9876"
    assert message.store_host == "[::1]:10911"
    assert message.sys_flag == codes.MSG_FLAG_BORNHOST_V6 | codes.MSG_FLAG_STOREHOST_V6
    assert message.offset_msg_id == "00000000000000000000000000000001" + "00002A9F" + "0000000000000007"
    assert len(message.offset_msg_id) == 56


def test_only_born_host_ipv6() -> None:
    born_ip = bytes.fromhex("fe800000000000000000000000000abc")
    [message] = decode_messages(record(born_host=(born_ip, 1)))
    assert message.born_host == "[fe80::abc]:1"
    assert message.store_host == "127.0.0.1:10911"
    assert message.offset_msg_id == "7F00000100002A9F0000000000001234"


def test_message_without_properties_falls_back_to_offset_msg_id() -> None:
    [message] = decode_messages(record(properties=b""))
    assert message.properties == {}
    assert message.tags is None and message.keys is None
    assert message.msg_id == message.offset_msg_id == "7F00000100002A9F0000000000001234"


def test_several_records_decode_in_order() -> None:
    body = b"".join(
        record(
            queue_offset=offset,
            body=bytes([offset]) * offset,
            properties=properties_block({"UNIQ_KEY": f"id{offset}"}),
        )
        for offset in range(1, 6)
    )
    messages = decode_messages(body)
    assert [m.queue_offset for m in messages] == [1, 2, 3, 4, 5]
    assert [m.msg_id for m in messages] == ["id1", "id2", "id3", "id4", "id5"]
    assert [len(m.body) for m in messages] == [1, 2, 3, 4, 5]


def test_empty_body_gives_no_messages() -> None:
    assert decode_messages(b"") == []
    assert all(len(column) == 0 for column in walk_columns(b""))


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_accepts_any_bytes_like(kind: type) -> None:
    data = record(properties=properties_block({"TAGS": "x"}))
    assert decode_messages(kind(data)) == decode_messages(data)


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\x01b\x02c\x01d\x02", {"a": "b", "c": "d"}),
        ("a\x01b", {"a": "b"}),  # no trailing separator
        ("\x01b\x02c\x01d\x02", {"c": "d"}),  # empty name skipped
        ("a\x01\x02c\x01d\x02", {"c": "d"}),  # empty value skipped
        ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # the value keeps further \x01
        ("ab\x02c\x01d\x02", {"c": "d"}),  # no name/value separator
        ("a\x01b\x02a\x01c\x02", {"a": "c"}),  # a later duplicate wins
        ("a\x01b\x02a\x01\x02", {"a": "b"}),  # ... unless it is skipped
        ("", {}),
    ],
)
def test_properties_follow_java_string2messageProperties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected
    # The batch parser used by the decoders agrees, in every position of a batch.
    blocks = [properties_block({"UNIQ_KEY": "u1"}), text.encode(), properties_block({"UNIQ_KEY": "u3"})]
    body = b"".join(record(queue_offset=i, properties=block) for i, block in enumerate(blocks))
    decoded = [m.properties for m in decode_messages(body)]
    assert decoded == [{"UNIQ_KEY": "u1"}, expected, {"UNIQ_KEY": "u3"}]


def test_invalid_utf8_properties_are_replaced_not_fatal() -> None:
    [message] = decode_messages(record(properties=b"TAGS\x01\xff\xfe\x02"))
    assert message.tags == "\ufffd\ufffd"


def test_property_values_may_contain_the_batch_joiner() -> None:
    blocks = [b"TAGS\x01a\x03b\x02", b"TAGS\x01c\x02"]
    body = b"".join(record(queue_offset=i, properties=block) for i, block in enumerate(blocks))
    assert [m.tags for m in decode_messages(body)] == ["a\x03b", "c"]


def test_trailing_text_after_the_last_separator_stays_in_its_message() -> None:
    # Without a trailing separator, "z" must not merge into the next message's first name.
    blocks = [b"TAGS\x01a\x02z", b"TAGS\x01c\x02"]
    body = b"".join(record(queue_offset=i, properties=block) for i, block in enumerate(blocks))
    assert [m.properties for m in decode_messages(body)] == [{"TAGS": "a"}, {"TAGS": "c"}]


# --------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------

ORIGINAL = ("compress me " * 500).encode()


def test_zstd_fixture_lacks_the_content_size_one_shot_decoding_needs() -> None:
    with pytest.raises(zstandard.ZstdError, match="content size"):
        zstandard.ZstdDecompressor().decompress(zstd_stream(ORIGINAL))


@pytest.mark.parametrize(
    ("compression_type", "compressed"),
    [
        (codes.COMPRESSION_ZLIB, zlib.compress(ORIGINAL, 5)),
        (codes.COMPRESSION_LEGACY_ZLIB, zlib.compress(ORIGINAL, 5)),
        (codes.COMPRESSION_LZ4, lz4.frame.compress(ORIGINAL)),
        (codes.COMPRESSION_ZSTD, zstd_stream(ORIGINAL)),
        (codes.COMPRESSION_LZ4, lz4.frame.compress(ORIGINAL[:100]) + lz4.frame.compress(ORIGINAL[100:])),
        (codes.COMPRESSION_ZSTD, zstd_stream(ORIGINAL[:100]) + zstd_stream(ORIGINAL[100:])),
    ],
    ids=["zlib", "zlib-legacy-type-0", "lz4", "zstd", "lz4-two-frames", "zstd-two-frames"],
)
def test_compressed_bodies_are_decompressed(compression_type: int, compressed: bytes) -> None:
    sys_flag = codes.MSG_FLAG_COMPRESSED | compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT
    [message] = decode_messages(record(body=compressed, sys_flag=sys_flag))
    assert message.body == ORIGINAL
    # As in Java, the COMPRESSED bit is cleared; the type bits stay.
    assert message.sys_flag == compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT


@pytest.mark.parametrize(
    ("compression_type", "garbage"),
    [
        (codes.COMPRESSION_ZLIB, b"not zlib at all"),
        (codes.COMPRESSION_LZ4, b"not lz4 at all"),
        (codes.COMPRESSION_ZSTD, b"not zstd at all"),
        (codes.COMPRESSION_LZ4, lz4.frame.compress(ORIGINAL)[:-5]),
        (codes.COMPRESSION_ZSTD, zstd_stream(ORIGINAL)[:-5]),
        (codes.COMPRESSION_ZLIB, zlib.compress(ORIGINAL)[:-5]),
    ],
    ids=["zlib", "lz4", "zstd", "lz4-truncated", "zstd-truncated", "zlib-truncated"],
)
def test_broken_compressed_body_names_the_queue_offset(compression_type: int, garbage: bytes) -> None:
    sys_flag = codes.MSG_FLAG_COMPRESSED | compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT
    body = record(queue_offset=0) + record(body=garbage, sys_flag=sys_flag, queue_offset=77)
    with pytest.raises(ProtocolError, match=r"queue offset 77 \(byte \d+\)"):
        decode_messages(body)


# A body that decompresses to many times its size, and the bound the tests read it under.
BOMB = bytes(64 * 1024)
BOUND = 1000
BOUND_FACTS = r"at topic TopicA, queue 3, queue offset 77 decompresses to more than 1000 bytes"
# The decoders speak of their bound; the rows of a task name the option that sets it.
BOUND_ERROR = BOUND_FACTS + r".*raise the bound above their size"
OPTION_BOUND_ERROR = BOUND_FACTS + r".*raise the maxBodyBytes"


def compressed_as(compression_type: int, data: bytes, frames: int = 1) -> tuple[int, bytes]:
    """The sysFlag and body of a message whose body ``data`` is compressed, in ``frames`` frames."""
    step = -(-len(data) // frames)
    parts = [data[i : i + step] for i in range(0, len(data), step)]
    compress = {
        codes.COMPRESSION_ZLIB: lambda part: zlib.compress(part, 5),
        codes.COMPRESSION_LZ4: lz4.frame.compress,
        codes.COMPRESSION_ZSTD: zstd_stream,
    }[compression_type]
    return (
        codes.MSG_FLAG_COMPRESSED | compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT,
        b"".join(map(compress, parts)),
    )


ALL_COMPRESSIONS = pytest.mark.parametrize(
    ("compression_type", "frames"),
    [
        (codes.COMPRESSION_ZLIB, 1),
        (codes.COMPRESSION_LZ4, 1),
        (codes.COMPRESSION_ZSTD, 1),
        (codes.COMPRESSION_LZ4, 2),
        (codes.COMPRESSION_ZSTD, 2),
    ],
    ids=["zlib", "lz4", "zstd", "lz4-two-frames", "zstd-two-frames"],
)


def bomb_body(compression_type: int, frames: int, magic: int = codes.MESSAGE_MAGIC_V1) -> bytes:
    """A pull body whose second message, TopicA queue 3 offset 77, decompresses past BOUND."""
    sys_flag, compressed = compressed_as(compression_type, BOMB, frames)
    assert len(compressed) < BOUND
    return record(queue_offset=76, queue_id=3, magic=magic) + record(
        body=compressed, sys_flag=sys_flag, queue_offset=77, queue_id=3, magic=magic
    )


@ALL_COMPRESSIONS
def test_a_body_decompressing_past_the_bound_fails_naming_the_message(compression_type: int, frames: int) -> None:
    """Both decoders stop at the bound (two frames each under it count together) and name the
    message by topic, queue and offset, with what to do."""
    body = bomb_body(compression_type, frames)
    with pytest.raises(BodyTooLargeError, match=BOUND_ERROR):
        decode_messages(body, max_body_bytes=BOUND)
    with pytest.raises(BodyTooLargeError, match=BOUND_ERROR):
        decode_pulls([body], max_body_bytes=BOUND)


@ALL_COMPRESSIONS
@pytest.mark.parametrize("magic", [codes.MESSAGE_MAGIC_V1, codes.MESSAGE_MAGIC_V2], ids=["bulk", "per-record"])
def test_the_rows_of_a_task_name_the_option_that_sets_the_bound(compression_type: int, frames: int, magic: int) -> None:
    """What a task fails with names the message and the option to raise, whichever decoder (the
    bulk one at the flush, the per-record one as the pull is added) meets the body."""
    builder = BatchBuilder([RowRange("TopicA", "broker-a", 3, 0, 100)], None, max_body_bytes=BOUND)
    with pytest.raises(BodyTooLargeError, match=OPTION_BOUND_ERROR):
        builder.add_pull(0, bomb_body(compression_type, frames, magic), 0)
        builder.flush()


@ALL_COMPRESSIONS
def test_a_body_of_exactly_the_bound_is_read(compression_type: int, frames: int) -> None:
    sys_flag, compressed = compressed_as(compression_type, BOMB[:BOUND], frames)
    body = record(body=compressed, sys_flag=sys_flag)
    assert [m.body for m in decode_messages(body, max_body_bytes=BOUND)] == [BOMB[:BOUND]]
    assert decode_pulls([body], max_body_bytes=BOUND).body.to_pylist() == [BOMB[:BOUND]]


def test_the_default_bound_is_four_of_rocketmqs_largest_default_messages() -> None:
    assert DEFAULT_MAX_BODY_BYTES == 4 * ROCKETMQ_DEFAULT_MAX_MESSAGE_BYTES == 16 * 1024 * 1024


def test_unknown_compression_type_is_a_protocol_error() -> None:
    sys_flag = codes.MSG_FLAG_COMPRESSED | 5 << codes.MSG_COMPRESSION_TYPE_SHIFT
    with pytest.raises(ProtocolError, match="unknown compression type 5"):
        decode_messages(record(body=b"abc", sys_flag=sys_flag))


def test_empty_compressed_body_is_left_alone_like_java() -> None:
    [message] = decode_messages(record(body=b"", sys_flag=codes.MSG_FLAG_COMPRESSED))
    assert message.body == b""
    assert message.sys_flag == codes.MSG_FLAG_COMPRESSED


# --------------------------------------------------------------------------
# Inner batches
# --------------------------------------------------------------------------

BATCH_FLAGS = codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP
INNER = [
    (0, b"first", properties_block({"UNIQ_KEY": "U0", "TAGS": "A"})),
    (7, "zwei ✓".encode(), properties_block({"UNIQ_KEY": "U1", "KEYS": "k"})),
    (0, b"", b""),
]


def test_inner_batch_of_three_is_unwrapped() -> None:
    batch_body = b"".join(inner_message(*inner) for inner in INNER)
    outer = record(
        body=batch_body,
        sys_flag=BATCH_FLAGS,
        queue_offset=100,
        queue_id=2,
        reconsume_times=3,
        properties=properties_block({"INNER_NUM": "3", "UNIQ_KEY": "OUTER", "CLUSTER": "c"}),
    )
    messages = decode_messages(record(queue_offset=99) + outer + record(queue_offset=103))
    assert [m.queue_offset for m in messages] == [99, 100, 101, 102, 103]
    first, second, third = messages[1:4]
    assert [m.body for m in (first, second, third)] == [b"first", "zwei ✓".encode(), b""]
    assert [m.flag for m in (first, second, third)] == [0, 7, 0]
    # Each inner message has its own properties; the outer ones are not inherited.
    assert first.properties == {"UNIQ_KEY": "U0", "TAGS": "A"}
    assert (first.msg_id, first.tags, first.keys) == ("U0", "A", None)
    assert (second.msg_id, second.tags, second.keys) == ("U1", None, "k")
    assert third.properties == {} and third.msg_id == third.offset_msg_id
    for message in (first, second, third):
        assert message.topic == "TopicA"
        assert message.queue_id == 2
        assert message.commit_log_offset == 0x1234
        assert message.born_host == "10.0.0.7:53412"
        assert message.store_host == "127.0.0.1:10911"
        assert message.store_timestamp == 1_700_000_000_123
        assert message.reconsume_times == 3
        assert message.sys_flag == BATCH_FLAGS
        assert message.offset_msg_id == "7F00000100002A9F0000000000001234"


def test_compressed_inner_batch_is_decompressed_then_unwrapped() -> None:
    batch_body = b"".join(inner_message(*inner) for inner in INNER)
    zlib_type = codes.COMPRESSION_ZLIB << codes.MSG_COMPRESSION_TYPE_SHIFT
    sys_flag = BATCH_FLAGS | codes.MSG_FLAG_COMPRESSED | zlib_type
    messages = decode_messages(record(body=zlib.compress(batch_body), sys_flag=sys_flag))
    assert [m.body for m in messages] == [inner[1] for inner in INNER]


def test_inner_batch_flag_alone_does_not_unwrap() -> None:
    batch_body = inner_message(0, b"x", b"")
    [message] = decode_messages(record(body=batch_body, sys_flag=codes.MSG_FLAG_INNER_BATCH))
    assert message.body == batch_body


@pytest.mark.parametrize(
    "batch_body",
    [
        inner_message(0, b"abc", b"")[:-1],  # truncated
        struct.pack(">iiiii", 100, 0, 0, 0, 3) + b"abc\x00\x00",  # size past the end
        struct.pack(">iiiii", 25, 0, 0, 0, -1) + b"abcde",  # negative body length
        struct.pack(">iiiii", 25, 0, 0, 0, 3) + b"abc\x00\x05",  # properties past its size
        b"\x00\x00\x00",  # shorter than an inner header
    ],
    ids=["truncated", "size", "negative-body", "properties", "tiny"],
)
def test_broken_inner_batch_is_a_protocol_error(batch_body: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"message record at byte 0: inner message at batch byte"):
        decode_messages(record(body=batch_body, sys_flag=BATCH_FLAGS))


# --------------------------------------------------------------------------
# Malformed records
# --------------------------------------------------------------------------


def test_every_truncation_is_a_protocol_error_naming_the_position() -> None:
    first = record(properties=properties_block({"TAGS": "a"}))
    data = first + record(properties=properties_block({"TAGS": "b"}))
    for cut in range(len(first) + 1, len(data)):
        with pytest.raises(ProtocolError, match=f"message record at byte {len(first)}"):
            decode_messages(data[:cut])
    for cut in range(1, len(first)):
        with pytest.raises(ProtocolError, match="message record at byte 0"):
            decode_messages(data[:cut])


def test_bad_magic() -> None:
    with pytest.raises(ProtocolError, match="bad magic code 0xDAA320A9"):
        decode_messages(record(magic=0xDAA320A9))


def set_int(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack(">i", value) + data[offset + 4 :]


BODY_LENGTH_AT = 84
SAMPLE_PROPERTIES = properties_block({"TAGS": "a"})
SAMPLE = record(body=b"payload", properties=SAMPLE_PROPERTIES)
PROPERTIES_LENGTH_AT = len(SAMPLE) - len(SAMPLE_PROPERTIES) - 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda data: set_int(data, 0, len(data) + 1), "declared size"),
        (lambda data: set_int(data, 0, 10), "declared size 10"),
        (lambda data: set_int(data, 0, -5), "declared size -5"),
        (lambda data: set_int(data, BODY_LENGTH_AT, 10_000), "body length 10000 runs past"),
        (lambda data: set_int(data, BODY_LENGTH_AT, -1), "body length -1 runs past"),
        (lambda data: set_int(data, BODY_LENGTH_AT, 6), "at byte 0: truncated"),
        (
            lambda data: data[:PROPERTIES_LENGTH_AT] + b"\x00\x05" + data[PROPERTIES_LENGTH_AT + 2 :],
            "lengths do not end the record at its declared size",
        ),
        (lambda data: set_int(data, 0, len(data) - 1)[:-1], "lengths do not end the record"),
        (lambda data: data + b"\x00", f"at byte {len(SAMPLE)}: truncated"),
    ],
    ids=[
        "size-past-end",
        "size-too-small",
        "size-negative",
        "body-past-end",
        "body-negative",
        "body-short",
        "properties-length",
        "record-short",
        "trailing-byte",
    ],
)
def test_inconsistent_lengths_are_protocol_errors(mutate: Callable[[bytes], bytes], message: str) -> None:
    assert struct.unpack_from(">i", SAMPLE, BODY_LENGTH_AT) == (len(b"payload"),)
    with pytest.raises(ProtocolError, match=message):
        decode_messages(mutate(SAMPLE))


# --------------------------------------------------------------------------
# Columns
# --------------------------------------------------------------------------


def test_columns_hold_the_same_values_as_messages() -> None:
    batch_body = b"".join(inner_message(*inner) for inner in INNER)
    data = b"".join(
        (
            record(queue_offset=1, properties=properties_block({"TAGS": "A", "UNIQ_KEY": "x"})),
            record(queue_offset=2, body=batch_body, sys_flag=BATCH_FLAGS),
            record(queue_offset=5, born_host=(bytes(15) + b"\x02", 5), properties=b"odd\x02"),
        )
    )
    messages = decode_messages(data)
    columns = as_python(walk_columns(data))
    assert len(messages) == 5
    assert set(ArrowColumns._fields) <= set(Message._fields)
    for name in ArrowColumns._fields:
        assert columns[name] == [getattr(m, name) for m in messages], name


# --------------------------------------------------------------------------
# Tags
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Aa", 2112),
        ("BB", 2112),
        ("", 0),
        ("hello", 99162322),
        ("TagA", 2598919),  # ((84*31 + 97)*31 + 103)*31 + 65
        ("\U0001f600", 1772899),  # surrogates D83D DE00: 55357*31 + 56832
        ("polygenelubricants", -(2**31)),  # wraps to Integer.MIN_VALUE
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (None, None),
        ("", None),
        ("*", None),
        ("TagA", frozenset({"TagA"})),
        ("TagA || TagB", frozenset({"TagA", "TagB"})),
        (" TagA ||  || TagB||", frozenset({"TagA", "TagB"})),
        ("\tTagA\n||\x00TagB", frozenset({"TagA", "TagB"})),  # Java trims chars <= U+0020
        ("\u3000TagA", frozenset({"\u3000TagA"})),  # ... but not Unicode spaces
        ("||", frozenset()),  # no tag at all: matches nothing on the broker
        (" * ", frozenset({"*"})),  # only an exact "*" means all
        ("A|B", frozenset({"A|B"})),
    ],
)
def test_parse_tag_expression_mirrors_filter_api(expression: str | None, expected: frozenset[str] | None) -> None:
    assert parse_tag_expression(expression) == expected


def test_tag_codes() -> None:
    assert tag_codes(["TagA", "TagB", "Aa", "BB"]) == {2598919, 2598920, 2112}
    assert tag_codes([]) == set()

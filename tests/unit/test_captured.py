"""The decoders on bytes a real RocketMQ 5.3.3 broker sent, checked against the official Java client.

``integration/capture_fixtures.py`` pulled these responses from a live broker and saved, next to them,
what the official Java consumer decoded from the same queues (``captured.json``). Every field
the Java client exposes must come out the same here; no broker is needed to run this.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

import pytest

from rocketmq_spark.records.columns import ArrowColumns, walk_columns
from rocketmq_spark.records.walk import Message, decode_messages
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import FrameReader, decode_frame
from tests.captured import LENGTH_FIELD_BYTES, body, case_names, expectations, raw
from tests.records import as_python

MAGIC_AT = 4
SYS_FLAG_AT = 36
BODY_LENGTH_AT = 80
TOPIC_LENGTH_V1_MAX = 127
COMPRESSED_BODY_BYTES = 5_000
MAGICS = {"V1": codes.MESSAGE_MAGIC_V1, "V2": codes.MESSAGE_MAGIC_V2}
COMPRESSION_TYPES = {"ZLIB": codes.COMPRESSION_ZLIB, "LZ4": codes.COMPRESSION_LZ4, "ZSTD": codes.COMPRESSION_ZSTD}

# Message field <- key of the official consumer's JSON line, for fields compared as they are.
SAME_AS_JAVA = {
    "topic": "topic",
    "queue_id": "queueId",
    "queue_offset": "queueOffset",
    "commit_log_offset": "commitLogOffset",
    "sys_flag": "sysFlag",
    "flag": "flag",
    "born_timestamp": "bornTimestamp",
    "born_host": "bornHost",
    "store_timestamp": "storeTimestamp",
    "store_host": "storeHost",
    "reconsume_times": "reconsumeTimes",
    "prepared_transaction_offset": "preparedTransactionOffset",
    "properties": "properties",
    "msg_id": "msgId",
    "tags": "tags",
    "keys": "keys",
}


def records(data: bytes) -> list[bytes]:
    """Raw records, split by their totalSize field."""
    out = []
    position = 0
    while position < len(data):
        size = int.from_bytes(data[position : position + 4], "big")
        out.append(data[position : position + size])
        position += size
    return out


def int32_at(record: bytes, position: int) -> int:
    return int.from_bytes(record[position : position + 4], "big")


def java_offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """MessageDecoder.createMessageId for an IPv4 store host."""
    ip, _, port = store_host.rpartition(":")
    return (
        (ipaddress.IPv4Address(ip).packed + int(port).to_bytes(4, "big") + commit_log_offset.to_bytes(8, "big"))
        .hex()
        .upper()
    )


def assert_same_as_java(message: Message, java: dict[str, Any]) -> None:
    for field, key in SAME_AS_JAVA.items():
        assert getattr(message, field) == java[key], field
    assert message.body == base64.b64decode(java["body"])
    if java["offsetMsgId"] is not None:
        assert message.offset_msg_id == java["offsetMsgId"]
    else:
        # Java gives inner-batch messages no offsetMsgId; this decoder names the record holding them.
        assert message.offset_msg_id == java_offset_msg_id(java["storeHost"], java["commitLogOffset"])


@pytest.mark.parametrize("case", case_names())
def test_every_message_decodes_as_the_official_consumer_read_it(case: str) -> None:
    java = expectations()[case]["messages"]

    messages = decode_messages(body(case))

    assert len(messages) == len(java)
    for message, expected in zip(messages, java):
        assert_same_as_java(message, expected)


@pytest.mark.parametrize("case", case_names())
def test_walk_columns_hold_the_same_values(case: str) -> None:
    messages = decode_messages(body(case))

    columns = as_python(walk_columns(body(case)))

    for field in ArrowColumns._fields:
        assert columns[field] == [getattr(m, field) for m in messages], field


@pytest.mark.parametrize("case", case_names())
def test_the_captured_magic_is_the_expected_version(case: str) -> None:
    expected = expectations()[case]

    magics = {int32_at(record, MAGIC_AT) for record in records(body(case))}

    assert magics == {MAGICS[expected["magic"]]}


def test_a_topic_longer_than_127_bytes_is_stored_with_the_v2_magic() -> None:
    expected = expectations()["long_topic"]
    (java,) = expected["messages"]
    assert expected["magic"] == "V2"
    assert len(java["topic"].encode()) > TOPIC_LENGTH_V1_MAX

    (message,) = decode_messages(body("long_topic"))

    assert message.topic == java["topic"]
    assert message.topic.startswith("%RETRY%")
    assert message.reconsume_times == java["reconsumeTimes"] == 1
    assert message.properties["RETRY_TOPIC"] == java["properties"]["RETRY_TOPIC"]


@pytest.mark.parametrize("case", ["zlib", "lz4", "zstd"])
def test_compressed_records_carry_the_producers_compression_type(case: str) -> None:
    kind = expectations()[case]["compression"]
    stored = records(body(case))

    messages = decode_messages(body(case))

    for record, message in zip(stored, messages, strict=True):
        sys_flag = int32_at(record, SYS_FLAG_AT)
        assert sys_flag & codes.MSG_FLAG_COMPRESSED
        compression = (sys_flag & codes.MSG_COMPRESSION_TYPE_MASK) >> codes.MSG_COMPRESSION_TYPE_SHIFT
        assert compression == COMPRESSION_TYPES[kind]
        assert int32_at(record, BODY_LENGTH_AT) < COMPRESSED_BODY_BYTES
        # As in Java, the decoded message keeps the type bits but no longer says "compressed".
        assert message.sys_flag == sys_flag & ~codes.MSG_FLAG_COMPRESSED
        assert len(message.body) == COMPRESSED_BODY_BYTES


def test_an_inner_batch_record_unwraps_into_consecutive_messages() -> None:
    java = expectations()["inner_batch"]["messages"]
    (record,) = records(body("inner_batch"))
    sys_flag = int32_at(record, SYS_FLAG_AT)
    assert sys_flag & codes.MSG_FLAG_INNER_BATCH and sys_flag & codes.MSG_FLAG_NEED_UNWRAP

    messages = decode_messages(body("inner_batch"))

    assert [m.queue_offset for m in messages] == [row["queueOffset"] for row in java] == list(range(len(java)))
    assert {m.commit_log_offset for m in messages} == {java[0]["commitLogOffset"]}
    assert len({m.msg_id for m in messages}) == len(java)


def test_unicode_tags_keys_properties_and_bodies_survive() -> None:
    java = expectations()["unicode"]["messages"]

    messages = decode_messages(body("unicode"))

    assert [m.tags for m in messages] == [row["tags"] for row in java] == ["标签"] * len(java)
    assert [m.body.decode() for m in messages] == [f"héllo wörld ✓ {i}" for i in range(len(java))]
    assert [m.properties["città"] for m in messages] == [f"Zürich-{i}" for i in range(len(java))]


def test_the_whole_captured_frame_decodes_to_the_brokers_answer() -> None:
    expected = expectations()["plain"]
    response = expected["response"]
    frame = raw("plain")
    assert int.from_bytes(frame[:LENGTH_FIELD_BYTES], "big") == len(frame) - LENGTH_FIELD_BYTES

    command = decode_frame(frame[LENGTH_FIELD_BYTES:])

    assert command.is_response and not command.is_oneway
    assert command.serialize_type == codes.SERIALIZE_JSON
    assert command.code == response["code"]
    assert command.remark == response["remark"]
    assert command.opaque == response["opaque"]
    assert int(command.ext_fields["nextBeginOffset"]) == response["nextBeginOffset"]
    assert int(command.ext_fields["minOffset"]) == response["minOffset"]
    assert int(command.ext_fields["maxOffset"]) == response["maxOffset"]
    assert command.body == body("plain")
    assert len(decode_messages(command.body)) == len(expected["messages"])


def test_the_frame_reader_splits_the_captured_frame_from_any_chunking() -> None:
    frame = raw("plain")
    whole = decode_frame(frame[LENGTH_FIELD_BYTES:])

    for chunk in (1, 7, len(frame) // 2, len(frame)):
        reader = FrameReader()
        commands = [c for i in range(0, len(frame), chunk) for c in reader.feed(frame[i : i + chunk])]
        assert commands == [whole]
        assert reader.buffered == 0

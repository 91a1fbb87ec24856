"""Messages as the sink puts them on the wire: property strings, unique ids, compressed bodies,
batch bodies, the send headers and a broker's answers to them, held to known bytes."""

from __future__ import annotations

import json
import os
import struct
import zlib
from datetime import datetime

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.compression import decompress_body
from rocketmq_spark.records.outgoing import (
    COMPRESSED_ZLIB_SYS_FLAG,
    MAX_PROPERTIES_BYTES,
    UniqueIds,
    batch_record_size,
    compress_body,
    encode_batch,
    encode_properties,
    message_properties,
    month_start_ms,
    plain_properties,
    properties_bytes,
)
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.remoting import membership, sending
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, TopicNotFoundError
from rocketmq_spark.remoting.route import parse_route

QUEUE = MessageQueue("orders", "broker-a", 3)
LOOPBACK = bytes([127, 0, 0, 1])


def test_properties_are_name_value_pairs_in_order_and_skip_none() -> None:
    text = encode_properties({"TAGS": "t", "a": "1", "gone": None, "UNIQ_KEY": "ID"})
    assert text == "TAGS\x01t\x02a\x011\x02UNIQ_KEY\x01ID\x02"
    assert parse_properties(text) == {"TAGS": "t", "a": "1", "UNIQ_KEY": "ID"}


def test_a_message_carries_tags_keys_wait_and_its_id_as_a_java_message_does() -> None:
    properties = message_properties(tags="paid", keys="k1 k2", unique_id="ID", user={"region": "eu"})
    assert properties == {"region": "eu", "TAGS": "paid", "KEYS": "k1 k2", "WAIT": "true", "UNIQ_KEY": "ID"}
    bare = message_properties(tags=None, keys="", unique_id="ID", extra={"DELAY": "3"})
    assert bare == {"WAIT": "true", "DELAY": "3", "UNIQ_KEY": "ID"}


@pytest.mark.parametrize(("tags", "keys"), [("t", "k1 k2"), (None, "k"), ("t", None), (None, None), ("", "")])
def test_plain_properties_are_the_general_encoding_without_user_properties(tags: str | None, keys: str | None) -> None:
    general = encode_properties(message_properties(tags=tags, keys=keys, unique_id="ID"))
    assert plain_properties(tags, keys, "ID") == general


def test_properties_longer_than_a_java_short_are_refused() -> None:
    assert properties_bytes("a\x01é\x02") == "a\x01é\x02".encode()
    with pytest.raises(ValueError, match=str(MAX_PROPERTIES_BYTES)):
        properties_bytes("x" * (MAX_PROPERTIES_BYTES + 1))


def test_unique_ids_are_java_s_layout_in_upper_case_hex() -> None:
    start, _ = month_start_ms(1_700_000_000_000)
    now = start + 0x01020304
    ids = UniqueIds(LOOPBACK, clock=lambda: now, fixed=0xCAFEBABE)
    pid = f"{os.getpid() & 0xFFFF:04X}"
    assert ids.next() == f"7F000001{pid}CAFEBABE010203040000"
    assert ids.next() == f"7F000001{pid}CAFEBABE010203040001"
    assert len(ids.next()) == 32  # 16 bytes, as the source and the dashboard show an IPv4 producer's msgId


def test_unique_ids_count_from_the_local_month_start_and_wrap_the_counter() -> None:
    now = int(datetime(2026, 3, 1, 0, 0, 5).timestamp() * 1000)
    ids = UniqueIds(LOOPBACK, clock=lambda: now, fixed=0)
    first = ids.next()
    assert first[-12:] == f"{5000:08X}0000"
    for _ in range(0xFFFF):
        ids.next()
    assert ids.next()[-4:] == "0000"  # Java writes the counter's low 16 bits


def test_month_start_is_the_first_local_midnight_and_the_next_month_s() -> None:
    start, following = month_start_ms(int(datetime(2026, 12, 31, 23, 0).timestamp() * 1000))
    assert datetime.fromtimestamp(start / 1000) == datetime(2026, 12, 1)
    assert datetime.fromtimestamp(following / 1000) == datetime(2027, 1, 1)


def test_unique_ids_move_to_the_next_month() -> None:
    moments = iter(
        [int(datetime(2026, 1, 31, 23, 59).timestamp() * 1000), int(datetime(2026, 2, 1).timestamp() * 1000)]
    )
    ids = UniqueIds(LOOPBACK, clock=lambda: next(moments), fixed=0)
    assert ids.next()[-12:-4] == "00000000"


def test_compressed_bodies_are_zlib_and_flagged_as_the_java_producer_flags_them() -> None:
    body = b"order " * 1000
    compressed = compress_body(body)
    assert compressed[:2] == b"\x78\x5e"  # zlib header of level 5
    assert zlib.decompress(compressed) == body
    assert COMPRESSED_ZLIB_SYS_FLAG == 0x301
    assert decompress_body(compressed, COMPRESSED_ZLIB_SYS_FLAG, 0, 0) == body


def test_a_batch_body_is_java_s_inner_records() -> None:
    body = encode_batch([(0, b"ab", b"K\x01v\x02"), (7, b"", b"")])
    first = struct.pack(">iiiii", 4 * 5 + 2 + 2 + 4, 0, 0, 0, 2) + b"ab" + struct.pack(">h", 4) + b"K\x01v\x02"
    second = struct.pack(">iiiii", 22, 0, 0, 7, 0) + struct.pack(">h", 0)
    assert body == first + second
    assert batch_record_size(2, 4) == len(first)


def _answer(code: int, version: int = 479, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, flag=FLAG_RESPONSE, ext_fields=dict(fields), version=version)


def test_a_single_send_carries_the_v2_header_with_short_names() -> None:
    call = sending.send_message(QUEUE, b"x", group="g", properties="a\x01b\x02", sys_flag=0x301, born_ms=5)
    assert call.code == RequestCode.SEND_MESSAGE_V2 == 310
    assert call.body == b"x"
    assert RemotingCommand.request(call.code, call.fields).ext_fields == {
        "a": "g",
        "b": "orders",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "769",
        "g": "5",
        "h": "0",
        "i": "a\x01b\x02",
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }


def test_a_batch_send_is_code_320_flagged_batch_and_never_compressed() -> None:
    call = sending.send_batch(QUEUE, b"records", group="g", properties="WAIT\x01true\x02", born_ms=5)
    assert call.code == RequestCode.SEND_BATCH_MESSAGE == 320
    assert call.fields["m"] is True and call.fields["f"] == 0
    stored = call.read(_answer(ResponseCode.SUCCESS, msgId="AB,CD", queueId="3", queueOffset="10"), "host:1")
    assert stored.queue_offset == 10 and stored.offset_msg_id == "AB,CD"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.SUCCESS, sending.SendStatus.SEND_OK),
        (ResponseCode.FLUSH_DISK_TIMEOUT, sending.SendStatus.FLUSH_DISK_TIMEOUT),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, sending.SendStatus.FLUSH_SLAVE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, sending.SendStatus.SLAVE_NOT_AVAILABLE),
    ],
)
def test_stored_answers_are_results(code: int, status: sending.SendStatus) -> None:
    call = sending.send_message(QUEUE, b"x", group="g", properties="", sys_flag=0, born_ms=0)
    result = call.read(_answer(code, version=407, msgId="7F", queueId="3", queueOffset="42"), "host:1")
    assert (result.status, result.queue_id, result.queue_offset, result.server_version) == (status, 3, 42, 407)


def test_refusals_are_errors_with_the_broker_s_answer() -> None:
    call = sending.send_message(QUEUE, b"x", group="g", properties="", sys_flag=0, born_ms=0)
    with pytest.raises(TopicNotFoundError, match="host:1.*no route"):
        call.read(RemotingCommand(code=ResponseCode.TOPIC_NOT_EXIST, flag=FLAG_RESPONSE, remark="no route"), "host:1")
    with pytest.raises(BrokerResponseError) as busy:
        call.read(RemotingCommand(code=ResponseCode.SYSTEM_BUSY, flag=FLAG_RESPONSE), "host:1")
    assert busy.value.retriable


def test_a_producer_heartbeat_names_the_group_and_reads_the_server_s_version() -> None:
    call = membership.producer_heartbeat("10.0.0.1@x", "writers")
    assert call.code == RequestCode.HEART_BEAT
    assert json.loads(call.body) == {
        "clientID": "10.0.0.1@x",
        "producerDataSet": [{"groupName": "writers"}],
        "consumerDataSet": [],
    }
    assert call.read(_answer(ResponseCode.SUCCESS, version=407), "host:1") == 407


def _route(order: str | None = None) -> bytes:
    return json.dumps(
        {
            "orderTopicConf": order,
            "queueDatas": [
                {"brokerName": "b", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
                {"brokerName": "a", "readQueueNums": 4, "writeQueueNums": 3, "perm": 6},
                {"brokerName": "c", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
                {"brokerName": "r", "readQueueNums": 1, "writeQueueNums": 1, "perm": 4},
            ],
            "brokerDatas": [
                {"brokerName": "a", "brokerAddrs": {"0": "h:1"}},
                {"brokerName": "b", "brokerAddrs": {"0": "h:2"}},
                {"brokerName": "c", "brokerAddrs": {"1": "h:3"}},
                {"brokerName": "r", "brokerAddrs": {"0": "h:4"}},
            ],
        }
    ).encode()


def test_the_publish_list_is_writable_queues_of_brokers_with_a_master_by_name() -> None:
    queues = parse_route("orders", _route()).publish_queues()
    assert [(q.broker_name, q.queue_id) for q in queues] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]


def test_an_ordered_topic_s_publish_list_is_its_order_conf() -> None:
    queues = parse_route("orders", _route("b:1;a:2")).publish_queues()
    assert [(q.broker_name, q.queue_id) for q in queues] == [("b", 0), ("a", 0), ("a", 1)]

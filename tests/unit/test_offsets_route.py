"""The offset JSON model and topic-route parsing."""

from __future__ import annotations

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.route import parse_live_brokers, parse_route, quote_bare_int_keys
from rocketmq_spark.source.offsets import from_spark, parse_offset_json, to_spark


def test_offsets_round_trip_through_spark_json() -> None:
    offsets = {MessageQueue("t", "broker-b", 2): 7, MessageQueue("t", "broker-a", 10): 0}
    nested = to_spark(offsets)
    assert nested == {"t": {"broker-a": {"10": 0}, "broker-b": {"2": 7}}}
    assert from_spark(nested) == offsets


@pytest.mark.parametrize(
    "text",
    [
        "[1]",
        '{"t": 5}',
        '{"t": {"b": [1]}}',
        '{"t": {"b": {"x": 1}}}',
        '{"t": {"b": {"0": "5"}}}',
        '{"t": {"b": {"0": true}}}',
    ],
)
def test_malformed_offsets_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_offset_json(text)


ROUTE_4X = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b,1:x",'
    b'"cluster":"c"}],"queueDatas":[{"brokerName":"b,1:x","perm":6,"readQueueNums":4,'
    b'"topicSynFlag":0,"writeQueueNums":4}]}'
)


def test_route_with_bare_integer_keys_and_old_field_names() -> None:
    route = parse_route("t", ROUTE_4X)
    assert route.master_address("b,1:x") == "10.0.0.1:10911"
    assert route.brokers["b,1:x"].addresses[1] == "10.0.0.2:10911"
    assert route.readable_queues() == [MessageQueue("t", "b,1:x", q) for q in range(4)]


def test_quoting_leaves_string_contents_alone() -> None:
    assert quote_bare_int_keys('{0:"a,1:b",2:"c"}') == '{"0":"a,1:b","2":"c"}'


def test_write_only_queues_are_not_readable() -> None:
    body = b'{"brokerDatas":[],"queueDatas":[{"brokerName":"b","perm":2,"readQueueNums":4,"writeQueueNums":4}]}'
    assert parse_route("t", body).readable_queues() == []


@pytest.mark.parametrize("body", [b"\xff", b"[]", b'{"queueDatas":[{"perm":6}]}'])
def test_broken_route_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_route("t", body)


def test_live_brokers_from_cluster_info_with_bare_keys() -> None:
    body = (
        b'{"brokerAddrTable":{"broker-b":{"brokerAddrs":{0:"127.0.0.1:10921"},"brokerName":"broker-b"},'
        b'"broker-s":{"brokerAddrs":{1:"127.0.0.1:10931"},"brokerName":"broker-s"}},'
        b'"clusterAddrTable":{"DefaultCluster":["broker-b","broker-s"]}}'
    )
    assert parse_live_brokers(body) == frozenset({"broker-b"})  # a slave alone serves no pulls here

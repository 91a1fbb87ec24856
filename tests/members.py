"""Brokers as a consumer group's members see them, for unit tests: heartbeats register the client
id of their body on the broker they reach, UNREGISTER_CLIENT removes it, and
GET_CONSUMER_LIST_BY_GROUP answers as a broker does (SYSTEM_ERROR for a group without members)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ConnectionFailedError, RocketMQError
from rocketmq_spark.remoting.membership import NO_CONSUMER_REMARK

MEMBERSHIP_CODES = frozenset({RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
                              RequestCode.GET_CONSUMER_LIST_BY_GROUP})


class FakeMembers:
    """One group's members per broker address; ``down`` addresses refuse connections."""

    def __init__(self, others: Iterable[str] = (), addresses: Iterable[str] = ()) -> None:
        self.others = set(others)  # members on every broker (push consumers, other queries)
        self.members: dict[str, set[str]] = {a: set() for a in addresses}
        self.sent: list[tuple[str, int]] = []  # (address, request code), in order
        self.heartbeats: list[dict[str, Any]] = []  # bodies, as the broker reads them
        self.down: set[str] = set()
        self.handler: Any = None  # what answers the requests a broker sends the member on its own

    def serve(self, handler: Any) -> None:
        self.handler = handler

    def listed(self, address: str) -> set[str]:
        return self.others | self.members.setdefault(address, set())

    def call_many(self, addressed: Sequence[tuple[str, Call[Any]]], window: int = 64) -> list[Any]:
        outcomes: list[Any] = []
        for address, call in addressed:
            self.sent.append((address, call.code))
            if address in self.down:
                outcomes.append(ConnectionFailedError(f"cannot connect to {address}: refused", address))
                continue
            try:
                outcomes.append(call.read(self.answer(address, call), address))
            except RocketMQError as err:
                outcomes.append(err)
        return outcomes

    def answer(self, address: str, call: Call[Any]) -> RemotingCommand:
        if call.code == RequestCode.HEART_BEAT:
            body = json.loads(call.body)
            self.heartbeats.append(body)
            self.members.setdefault(address, set()).add(body["clientID"])
            return RemotingCommand(ResponseCode.SUCCESS)
        if call.code == RequestCode.UNREGISTER_CLIENT:
            self.members.setdefault(address, set()).discard(str(call.fields["clientID"]))
            return RemotingCommand(ResponseCode.SUCCESS)
        if call.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted(self.listed(address))
            if not ids:
                return RemotingCommand(ResponseCode.SYSTEM_ERROR,
                                       remark=f"{NO_CONSUMER_REMARK}, {call.fields['consumerGroup']}")
            return RemotingCommand(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())
        raise AssertionError(f"unexpected request {call.code}")

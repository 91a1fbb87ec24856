"""Credentials stay out of everything printed: reprs of the options, the client config and the
partitions Spark ships (and may show), and servers' answers that name the user.

The integration test against the ACL cluster checks a whole query's output; these pin the parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rocketmq_spark.model import ClientConfig, Credentials, MessageQueue
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.client import HIDDEN_ACCESS_KEY, RocketMQClient
from rocketmq_spark.remoting.errors import AuthenticationError
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.partition import make_partitions
from rocketmq_spark.source.planning import QueueRange
from tests.listeners import Listener

TIMEOUT_S = 2.0


@pytest.fixture
def refusing() -> Iterator[Callable[[str], Listener]]:
    made: list[Listener] = []

    def make(remark: str) -> Listener:
        made.append(Listener("answer", codes.ResponseCode.NO_PERMISSION, remark))
        return made[-1]

    yield make
    for listener in made:
        listener.close()


def test_credentials_never_show_in_a_repr() -> None:
    opts = parse_options(
        {
            "nameServer": "h:1",
            "topic": "orders",
            "consumerGroup": "g",
            "accessKey": "ak-4d1c",
            "secretKey": "sk-9b2e",
            "securityToken": "tok-51aa",
        },
        kind=ReadKind.STREAM,
    )
    part = make_partitions(opts, [[QueueRange(MessageQueue("orders", "broker-a", 0), 0, 5)]])[0]
    for value in (opts, opts.client, opts.client.credentials, part):
        text = f"{value!r} {value}"
        assert "sk-9b2e" not in text and "ak-4d1c" not in text and "tok-51aa" not in text
    assert opts.client.credentials is not None and opts.client.credentials.secret_key == "sk-9b2e"


def test_a_refused_access_key_is_not_repeated(refusing: Callable[[str], Listener]) -> None:
    """Brokers name the user they refuse; the error keeps the reason and hides the key."""
    broker = refusing("User:ak-7f3e is not found.").address
    config = ClientConfig(("127.0.0.1:1",), request_timeout=TIMEOUT_S, credentials=Credentials("ak-7f3e", "sk"))
    with RocketMQClient(config) as client, pytest.raises(AuthenticationError) as caught:
        client.call(broker, calls.max_offset(MessageQueue("orders", "broker-a", 0)))
    assert f"User:{HIDDEN_ACCESS_KEY} is not found." in str(caught.value)
    assert "ak-7f3e" not in str(caught.value)


def test_a_key_that_is_part_of_a_word_hides_only_itself(refusing: Callable[[str], Listener]) -> None:
    """A short key ("cons") also found inside words ("consumer") is hidden where it stands alone."""
    broker = refusing("User:cons has no permission to access Group:g from 127.0.0.1, no consumer.").address
    config = ClientConfig(("127.0.0.1:1",), request_timeout=TIMEOUT_S, credentials=Credentials("cons", "sk"))
    with RocketMQClient(config) as client, pytest.raises(AuthenticationError) as caught:
        client.call(broker, calls.max_offset(MessageQueue("orders", "broker-a", 0)))
    assert f"User:{HIDDEN_ACCESS_KEY} has no permission to access Group:g" in str(caught.value)
    assert "no consumer." in str(caught.value)

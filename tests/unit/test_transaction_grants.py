"""The grant line of a refusal met by the exactly-once sink asks for all that exactly once needs
on the resource (``sink/transaction_grants.py``): a line naming less would take away the rest."""

from __future__ import annotations

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import AuthorizationError, error_for_response
from rocketmq_spark.sink.commit import HALF_TOPIC
from rocketmq_spark.sink.placing import SendFailedError
from rocketmq_spark.sink.transaction_grants import granted_as_exactly_once


def acl2(resource: str) -> str:
    return f"User:writer has no permission to access {resource} from 10.0.0.1, no matched policies."


def refused(request: int, remark: str, code: int = ResponseCode.NO_PERMISSION) -> AuthorizationError:
    error = error_for_response(code, remark, request_code=request)
    assert isinstance(error, AuthorizationError)
    return error


def as_exactly_once(error: AuthorizationError) -> str:
    with pytest.raises(AuthorizationError) as caught, granted_as_exactly_once():
        raise error
    return str(caught.value)


@pytest.mark.parametrize(
    ("request_code", "resource", "plain_line", "exactly_once_line"),
    [
        (RequestCode.GET_MAX_OFFSET, "Topic:orders-out", "-a Sub,Get ", "-a Pub,Sub,Get "),
        (RequestCode.SEND_MESSAGE_V2, "Topic:orders-out", "-a Pub ", "-a Pub,Sub,Get "),
        (RequestCode.LOCK_BATCH_MQ, "Topic:ledger", "-a Sub ", "-a Pub,Sub,Get "),
        (RequestCode.LOCK_BATCH_MQ, "Group:orders-eo", "-a Sub ", "-a Sub "),
        (RequestCode.PULL_MESSAGE, f"Topic:{HALF_TOPIC}", "-a Sub ", "-a Sub "),
    ],
)
def test_an_acl2_refusal_asks_for_every_action_exactly_once_needs_there(
    request_code: int, resource: str, plain_line: str, exactly_once_line: str
) -> None:
    error = refused(request_code, acl2(resource))
    assert f"-r {resource} {plain_line}" in str(error), "the plain writer's or reader's line"
    said = as_exactly_once(error)
    assert f"-r {resource} {exactly_once_line}-d Allow" in said, said
    assert "has no permission to access" in said and f"to request {request_code}" in said, said


def test_a_plain_acl_refusal_asks_for_pub_and_sub_on_a_topic_written() -> None:
    remark = "org.apache.rocketmq.acl.common.AclException: No default permission for topic:orders-out"
    error = refused(RequestCode.SEND_MESSAGE_V2, remark, ResponseCode.SYSTEM_ERROR)
    assert "'orders-out=PUB'" in str(error)
    assert "add 'orders-out=PUB|SUB' to its topicPerms in plain_acl.yml" in as_exactly_once(error)


def test_other_errors_pass_through_unchanged() -> None:
    with pytest.raises(ValueError, match="not a refusal"), granted_as_exactly_once():
        raise ValueError("not a refusal")


def test_an_error_that_carries_a_refusal_s_words_asks_for_every_action_too() -> None:
    """A send that failed on a refusal is raised as the sink's SendFailedError, whose message
    quotes the refusal: its grant line is widened where it stands."""
    cause = refused(RequestCode.SEND_MESSAGE_V2, acl2("Topic:orders-out"))
    with pytest.raises(SendFailedError) as caught, granted_as_exactly_once():
        raise SendFailedError(MessageQueue("orders-out", "broker-a", 0), "10.0.0.1:10911", 1, cause) from cause
    said = str(caught.value)
    assert said.startswith("sending to topic orders-out, queue broker-a/0, failed after 1 attempt(s)"), said
    assert "-r Topic:orders-out -a Pub,Sub,Get -d Allow" in said and "-a Pub -d" not in said, said

"""A refusal names what to grant: the resource from the broker's remark, the action from the
request (the remark does not say it), and a grant line that keeps the use's other actions."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import AuthenticationError, AuthorizationError, error_for_response
from rocketmq_spark.remoting.grants import denial
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.options import RETRY_RESPONSE_CODES

ADDRESS = "127.0.0.1:10911"


def acl2(resource: str) -> str:
    """5.3.3's AclAuthorizationHandler message, its user hidden by the client."""
    return f"User:<accessKey> has no permission to access {resource} from 127.0.0.1, no matched policies."


@pytest.mark.parametrize(
    ("code", "resource", "needed", "line"),
    [
        (RequestCode.GET_MAX_OFFSET, "Topic:orders", "Get", "-r Topic:orders -a Sub,Get -d Allow"),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, "Topic:orders", "Get", "-r Topic:orders -a Sub,Get -d Allow"),
        (RequestCode.PULL_MESSAGE, "Topic:orders", "Sub", "-r Topic:orders -a Sub -d Allow"),
        (RequestCode.PULL_MESSAGE, "Group:g1", "Sub", "-r Group:g1 -a Sub -d Allow"),
        (RequestCode.QUERY_CONSUMER_OFFSET, "Group:g1", "Sub or Get", "-r Group:g1 -a Sub -d Allow"),
        (RequestCode.QUERY_CONSUMER_OFFSET, "Topic:orders", "Sub or Get", "-r Topic:orders -a Sub -d Allow"),
        (RequestCode.UPDATE_CONSUMER_OFFSET, "Group:g1", "Sub or Update", "-r Group:g1 -a Sub -d Allow"),
        (RequestCode.SEND_MESSAGE_V2, "Topic:out", "Pub", "-r Topic:out -a Pub -d Allow"),
        (RequestCode.SEND_BATCH_MESSAGE, "Topic:out", "Pub", "-r Topic:out -a Pub -d Allow"),
        (RequestCode.END_TRANSACTION, "Topic:out", "Pub", "-r Topic:out -a Pub -d Allow"),
        (RequestCode.LOCK_BATCH_MQ, "Group:pg", "Sub", "-r Group:pg -a Sub -d Allow"),
    ],
)
def test_a_denied_resource_names_the_action_and_the_grant_line(
    code: RequestCode, resource: str, needed: str, line: str
) -> None:
    error = error_for_response(ResponseCode.NO_PERMISSION, acl2(resource), request_code=code, address=ADDRESS)
    assert isinstance(error, AuthorizationError) and isinstance(error, AuthenticationError)
    assert not error.retriable
    text = str(error)
    assert f"The user needs {needed} on {resource}" in text, text
    assert f"mqadmin createAcl -n <nameServer> -c <cluster> -s User:<accessKey> {line}" in text, text
    assert text.startswith(f"NO_PERMISSION (16) to request {int(code)} from {ADDRESS}: {acl2(resource)}")


def test_the_proxy_s_system_error_names_the_grant_too() -> None:
    """The 5.x proxy's remoting port answers a denial as SYSTEM_ERROR with the same message."""
    error = error_for_response(
        ResponseCode.SYSTEM_ERROR, acl2("Group:g1"), request_code=RequestCode.PULL_MESSAGE, address=ADDRESS
    )
    assert isinstance(error, AuthorizationError)
    assert error.denial.resource == "Group:g1" and error.denial.needed == ("Sub",)


def test_a_route_the_proxy_refuses_names_the_grant_of_each_use() -> None:
    """A 5.x proxy checks GET_ROUTEINFO_BY_TOPIC (any of Pub, Sub, Get on the topic), which
    readers and writers both send first: the error gives the line for reading and for writing."""
    error = error_for_response(
        ResponseCode.SYSTEM_ERROR, acl2("Topic:out"), request_code=RequestCode.GET_ROUTEINFO_BY_TOPIC, address=ADDRESS
    )
    assert isinstance(error, AuthorizationError)
    text = str(error)
    assert "The user needs Pub or Sub or Get on Topic:out" in text, text
    line = "mqadmin createAcl -n <nameServer> -c <cluster> -s User:<accessKey> -r Topic:out"
    assert f"{line} -a Sub -d Allow to read it, or {line} -a Pub -d Allow to write it" in text, text


@pytest.mark.parametrize(
    ("code", "remark", "entry"),
    [
        (RequestCode.PULL_MESSAGE, "No default permission for topic:orders", "'orders=SUB' to its topicPerms"),
        (RequestCode.PULL_MESSAGE, "No default permission for group:g1", "'g1=SUB' to its groupPerms"),
        (RequestCode.SEND_MESSAGE_V2, "No default permission for topic:out", "'out=PUB' to its topicPerms"),
    ],
)
def test_a_4_9_plain_acl_refusal_names_the_plain_acl_entry(code: RequestCode, remark: str, entry: str) -> None:
    wrapped = f"org.apache.rocketmq.acl.common.AclException: {remark}"
    error = error_for_response(ResponseCode.SYSTEM_ERROR, wrapped, request_code=code, address=ADDRESS)
    assert isinstance(error, AuthorizationError)
    assert f"add {entry} in plain_acl.yml" in str(error), str(error)


@pytest.mark.parametrize(
    "remark", ["check signature failed.", "User:<accessKey> is not found.", "username cannot be null."]
)
def test_a_refused_user_is_not_taken_for_a_missing_grant(remark: str) -> None:
    error = error_for_response(ResponseCode.NO_PERMISSION, remark, request_code=RequestCode.PULL_MESSAGE)
    assert type(error) is AuthenticationError
    assert denial(RequestCode.PULL_MESSAGE, remark) is None


def test_an_unlisted_request_still_names_the_resource() -> None:
    found = denial(RequestCode.GET_BROKER_CONFIG, acl2("Topic:t"))
    assert found is not None and found.resource == "Topic:t" and found.needed == ()
    assert "needs access on Topic:t" in found.advice()


def test_a_refused_user_is_not_sent_again_but_a_forbidden_topic_is() -> None:
    """The sink retries NO_PERMISSION as the Java producer does (a broker whose topic takes no
    sends), but not a refusal of its user: no other attempt changes a grant."""
    retry = Retry(attempts=3, answers=RETRY_RESPONSE_CODES)
    denied = error_for_response(ResponseCode.NO_PERMISSION, acl2("Topic:out"), request_code=RequestCode.SEND_MESSAGE_V2)
    forbidden = error_for_response(
        ResponseCode.NO_PERMISSION,
        "the topic[out] sending message is forbidden",
        request_code=RequestCode.SEND_MESSAGE_V2,
    )
    assert not retry.retriable(denied)
    assert retry.retriable(forbidden)

"""The error hierarchy and the mapping of response codes to errors."""

from __future__ import annotations

import pytest

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerResponseError,
    ConnectionFailedError,
    DataLossError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    TopicNotFoundError,
    error_for_response,
)


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (ConnectionFailedError("refused"), True),
        (RequestTimeoutError("3000 ms"), True),
        (ProtocolError("bad frame"), False),
        (DataLossError("offsets gone"), False),
        (ConfigurationError("topic", "is required", "Set .option('topic', ...)"), False),
    ],
)
def test_retriable_by_class(error: RocketMQError, retriable: bool) -> None:
    assert isinstance(error, RocketMQError)
    assert error.retriable is retriable


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        (codes.ResponseCode.SYSTEM_BUSY, True),
        (codes.ResponseCode.GO_AWAY, True),
        (codes.ResponseCode.FLOW_CONTROL, True),
        (codes.ResponseCode.SYSTEM_ERROR, False),
        (codes.ResponseCode.NO_PERMISSION, False),
        (codes.ResponseCode.TOPIC_NOT_EXIST, False),
        (codes.ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, False),
        (9999, False),
    ],
)
def test_retriable_by_response_code(code: int, retriable: bool) -> None:
    assert error_for_response(code, None).retriable is retriable


@pytest.mark.parametrize(
    ("code", "remark", "cls"),
    [
        (codes.ResponseCode.NO_PERMISSION, "check signature failed.", AuthenticationError),
        (codes.ResponseCode.NO_PERMISSION, None, AuthenticationError),
        # The 5.x proxy answers ACL 2.0 failures with SYSTEM_ERROR and the bare message.
        (codes.ResponseCode.SYSTEM_ERROR, "check signature failed.", AuthenticationError),
        (codes.ResponseCode.SYSTEM_ERROR, "User:rocketmq2 is not found.", AuthenticationError),
        (codes.ResponseCode.SYSTEM_ERROR, "User:rocketmq2 is disabled.", AuthenticationError),
        (codes.ResponseCode.SYSTEM_ERROR, "username cannot be null.", AuthenticationError),
        (
            codes.ResponseCode.SYSTEM_ERROR,
            "Authentication failed. Please verify the credentials and try again.",
            AuthenticationError,
        ),
        (
            codes.ResponseCode.SYSTEM_ERROR,
            "User:ak has no permission to access Topic:T from 127.0.0.1, DENY.",
            AuthorizationError,
        ),
        # 4.9.x plain ACL: the hook's exception as exceptionSimpleDesc renders it.
        (
            codes.ResponseCode.SYSTEM_ERROR,
            "org.apache.rocketmq.acl.common.AclException: [10015:signature-failed] unable to calculate",
            AuthenticationError,
        ),
        (codes.ResponseCode.SYSTEM_ERROR, "java.lang.NullPointerException", BrokerResponseError),
        (codes.ResponseCode.SYSTEM_ERROR, None, BrokerResponseError),
        (codes.ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server for the topic: T", TopicNotFoundError),
        (codes.ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist", BrokerResponseError),
    ],
)
def test_error_class_by_code_and_remark(code: int, remark: str | None, cls: type) -> None:
    error = error_for_response(code, remark)
    assert type(error) is cls
    assert isinstance(error, BrokerResponseError)
    assert error.code == code and error.remark == remark


def test_message_names_the_code_and_keeps_the_number() -> None:
    error = error_for_response(
        codes.ResponseCode.NO_PERMISSION,
        "check signature failed.",
        request_code=codes.RequestCode.PULL_MESSAGE,
        address="127.0.0.1:10911",
    )
    assert str(error) == "NO_PERMISSION (16) to request 11 from 127.0.0.1:10911: check signature failed."
    assert (error.request_code, error.address) == (codes.RequestCode.PULL_MESSAGE, "127.0.0.1:10911")


def test_unknown_codes_are_never_lost() -> None:
    error = error_for_response(4242, "new in 6.0")
    assert str(error) == "response code 4242: new in 6.0"
    assert type(error) is BrokerResponseError


def test_response_code_names() -> None:
    assert codes.response_code_name(codes.ResponseCode.SUCCESS) == "SUCCESS"
    assert codes.response_code_name(21) == "PULL_OFFSET_MOVED"
    assert codes.response_code_name(1500) == "GO_AWAY"
    assert codes.response_code_name(15) == "VERSION_NOT_SUPPORTED"
    assert codes.response_code_name(4242) is None
    # Request codes share numbers with response codes but are not response names.
    assert codes.response_code_name(codes.RequestCode.GET_ROUTEINFO_BY_TOPIC) is None


def test_configuration_error_names_the_option_and_the_fix() -> None:
    error = ConfigurationError("expressionType", "'XPATH' is not supported", "Use TAG or SQL92.")
    assert isinstance(error, ValueError)
    assert str(error) == "option 'expressionType': 'XPATH' is not supported. Use TAG or SQL92."
    assert (error.option, error.fix) == ("expressionType", "Use TAG or SQL92.")

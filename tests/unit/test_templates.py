"""Requests rendered from a template decode to the same command as the ones encoded whole."""

from __future__ import annotations

import pytest

from rocketmq_spark.model import EXPRESSION_SQL92, EXPRESSION_TAG, SUBSCRIBE_ALL, MessageQueue
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.codec import RemotingCommand, decode_frame
from rocketmq_spark.remoting.templates import PullTemplates, RequestTemplate

LENGTH_FIELD = 4


def decoded(frame: bytes) -> RemotingCommand:
    assert int.from_bytes(frame[:LENGTH_FIELD], "big") == len(frame) - LENGTH_FIELD
    return decode_frame(frame[LENGTH_FIELD:])


@pytest.mark.parametrize(
    ("group", "subscription", "expression_type"),
    [
        ("plain-group", SUBSCRIBE_ALL, EXPRESSION_TAG),
        ('a "quoted" 100% group\\', "TagA || TagB", EXPRESSION_TAG),
        ("组-ü", "a > 5 AND b = 'x%d'", EXPRESSION_SQL92),
    ],
)
def test_a_templated_pull_is_the_pull_encoded_whole(group: str, subscription: str, expression_type: str) -> None:
    """Quotes, backslashes, percent signs and non-ASCII text in the fixed fields come out as the
    JSON encoder writes them; only the order of the extFields differs, which JSON leaves free."""
    queue = MessageQueue("topic-%s", 'broker-"a"', 7)
    for suspend in (0, 15000):
        spec = calls.PullSpec(queue, group, subscription, expression_type, suspend)
        whole = RemotingCommand.request(codes.RequestCode.PULL_MESSAGE, calls.pull_fields(spec, 123_456_789_012, 32))
        templated = PullTemplates().request(spec, 123_456_789_012, 32)
        assert templated.code == whole.code
        expected = decoded(whole.frame(2**31 - 2))
        got = decoded(templated.frame(2**31 - 2))
        assert got == expected
        assert got.ext_fields["queueOffset"] == "123456789012" and got.ext_fields["maxMsgNums"] == "32"


def test_each_request_of_a_template_has_its_own_values_and_opaque() -> None:
    template = RequestTemplate(
        codes.RequestCode.PULL_MESSAGE, {"topic": "t", "queueOffset": 0, "skipped": None}, ("queueOffset",)
    )
    first, second = decoded(template.request(5).frame(1)), decoded(template.request(6).frame(2))
    assert (first.opaque, first.ext_fields) == (1, {"topic": "t", "queueOffset": "5"})
    assert (second.opaque, second.ext_fields) == (2, {"topic": "t", "queueOffset": "6"})


def test_an_open_field_takes_only_an_int() -> None:
    template = RequestTemplate(codes.RequestCode.PULL_MESSAGE, {"topic": "t"}, ("queueOffset",))
    for wrong in ("5", 5.0, True):
        with pytest.raises(TypeError, match="takes an int"):
            template.request(wrong)  # type: ignore[arg-type]


def test_the_templates_a_client_keeps_are_bounded() -> None:
    templates = PullTemplates()
    for queue_id in range(5000):
        templates.request(calls.PullSpec(MessageQueue("t", "b", queue_id), "g", SUBSCRIBE_ALL, EXPRESSION_TAG), 0, 1)
    assert len(templates._templates) <= 4096

"""How a pull's answer code and remark become a PullStatus: code 20 means two different things."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.calls import PullResult, PullStatus, read_pull
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import ResponseCode

OFFSETS = {"nextBeginOffset": "40", "minOffset": "0", "maxOffset": "100"}


def answer(code: int, remark: str | None) -> PullResult:
    return read_pull(RemotingCommand(code, remark=remark, ext_fields=dict(OFFSETS)), "127.0.0.1:1")


@pytest.mark.parametrize(
    ("code", "remark", "status"),
    [
        (ResponseCode.SUCCESS, "FOUND", PullStatus.FOUND),
        (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", PullStatus.NO_NEW_MSG),
        (ResponseCode.PULL_NOT_FOUND, "OFFSET_FOUND_NULL", PullStatus.NO_NEW_MSG),
        (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", PullStatus.OFFSET_ILLEGAL),
        # A filter that matched nothing in the entries scanned: go on from nextBeginOffset.
        (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", PullStatus.NO_MATCHED_MSG),
        # Entries whose commit log is being deleted, a slave sending the client to its master, or no
        # remark at all: nextBeginOffset would skip what was not served.
        (ResponseCode.PULL_RETRY_IMMEDIATELY, "MESSAGE_WAS_REMOVING", PullStatus.RETRY_IMMEDIATELY),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, "OFFSET_OVERFLOW_ONE", PullStatus.RETRY_IMMEDIATELY),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, None, PullStatus.RETRY_IMMEDIATELY),
    ],
)
def test_each_pull_answer_has_its_status(code: int, remark: str | None, status: PullStatus) -> None:
    result = answer(code, remark)
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset, result.remark) == (
        status,
        40,
        0,
        100,
        remark or "",
    )

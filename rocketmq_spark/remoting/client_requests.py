"""Requests a broker sends to a registered member of a consumer group, read and answered. No I/O.

A broker ties a member to the connection its heartbeats come on and sends it requests of its own
there (the Java client's ``ClientRemotingProcessor`` answers them). The ones an operator's tools
cause:

- RESET_CONSUMER_CLIENT_OFFSET (one-way): ``mqadmin resetOffsetByTime`` and
  ``skipAccumulatedMessage`` on a 4.9 broker, which only tells the online members the new offsets
  (a ``ResetOffsetBody``, fastjson with MessageQueue keys) and leaves storing them to them;
- GET_CONSUMER_RUNNING_INFO: ``mqadmin consumerStatus`` and the dashboard's consumer view, relayed
  by the broker; answered with a ``ConsumerRunningInfo`` (see ``running_info_body``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import ProtocolError


@dataclass(frozen=True)
class OffsetReset:
    """A broker's notice that the group's offsets of a topic were reset (to ``offsets``)."""

    group: str
    topic: str
    timestamp_ms: int
    offsets: dict[MessageQueue, int]


def read_offset_reset(request: RemotingCommand) -> OffsetReset:
    """A RESET_CONSUMER_CLIENT_OFFSET request; raises ProtocolError if it is not readable."""
    fields = request.ext_fields
    try:
        table = fastjson.loads(request.body.decode("utf-8")).get("offsetTable") or {}
        pairs = table.items() if isinstance(table, dict) else table
        offsets = {MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"])): int(value)
                   for key, value in pairs}
        return OffsetReset(fields["group"], fields["topic"], int(fields.get("timestamp", "-1")), offsets)
    except (AttributeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(f"unreadable offset reset notice: {err!r}") from err


def response(code: int = ResponseCode.SUCCESS, body: bytes = b"", remark: str | None = None) -> RemotingCommand:
    """A response to a broker's request (the connection sets its opaque and response flag)."""
    return RemotingCommand(code=code, body=body, remark=remark)

"""Transactional (half) messages as calls: a half is an ordinary single send with two properties,
and END_TRANSACTION resolves it by the offsets the broker stored it at. No I/O.

A broker stores a half in its half topic (one queue), where no consumer of the real topic sees
it; END_TRANSACTION with COMMIT puts a copy in the real topic (queue offsets are given then),
ROLLBACK only records that the half is resolved. The broker finds the half by its commit-log
offset, and checks the half topic's queue offset and the producer group against it. A second
COMMIT of the same half stores the message twice: the caller resolves each half once, and keeps
what it needs to know which it resolved.

Sent two-way (the Java producer sends it one-way, and never learns whether it was put), so a
commit is known done when its answer arrives. ``from_check`` says the resolution answers a
check; brokers from 5.1.1 refuse a resolution of a half older than its check immunity otherwise.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.calls import Call, accepted
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.sending import SendResult

# The two properties that make a send a half (``MessageConst.PROPERTY_TRANSACTION_PREPARED`` and
# ``PROPERTY_PRODUCER_GROUP``).
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PREPARED = "true"
# An offset message id ends with the commit-log offset, as 16 hex digits
# (``MessageDecoder.createMessageId``: the store host's address, its port, then the offset).
COMMIT_LOG_OFFSET_HEX_DIGITS = 16


class Resolution(enum.IntEnum):
    """What END_TRANSACTION does with a half (``MessageSysFlag`` values)."""

    COMMIT = codes.MSG_FLAG_TRANSACTION_COMMIT
    ROLLBACK = codes.MSG_FLAG_TRANSACTION_ROLLBACK


@dataclass(frozen=True)
class Half:
    """A stored half, by what END_TRANSACTION names it with: its broker, real topic, commit-log
    offset, offset in the half topic's queue, and unique message id (``UNIQ_KEY``)."""

    broker_name: str
    topic: str
    commit_log_offset: int
    half_offset: int
    msg_id: str


def half_properties(group: str) -> dict[str, str]:
    """The properties a message needs, besides its own, to be sent as a half of ``group``."""
    return {PROPERTY_TRANSACTION_PREPARED: PREPARED, PROPERTY_PRODUCER_GROUP: group}


def commit_log_offset(offset_msg_id: str) -> int:
    """The commit-log offset an offset message id ends with."""
    digits = offset_msg_id[-COMMIT_LOG_OFFSET_HEX_DIGITS:]
    try:
        if len(digits) != COMMIT_LOG_OFFSET_HEX_DIGITS:
            raise ValueError(digits)
        return int(digits, 16)
    except ValueError as err:
        raise ProtocolError(f"offset message id {offset_msg_id!r} does not end with a commit-log offset") from err


def stored_half(result: SendResult, broker_name: str, topic: str, msg_id: str) -> Half:
    """The half a send's answer says the broker stored."""
    return Half(broker_name, topic, commit_log_offset(result.offset_msg_id), result.queue_offset, msg_id)


def end_transaction(half: Half, group: str, resolution: Resolution, *, from_check: bool) -> Call[None]:
    """END_TRANSACTION of one half, answered once the broker put the commit or rollback."""
    fields = {
        "producerGroup": group,
        "tranStateTableOffset": half.half_offset,
        "commitLogOffset": half.commit_log_offset,
        "commitOrRollback": int(resolution),
        "fromTransactionCheck": from_check,
        "msgId": half.msg_id,
        "transactionId": half.msg_id,
        "topic": half.topic,
        "bname": half.broker_name,
    }
    return Call(RequestCode.END_TRANSACTION, fields, _read_end)


def _read_end(response: RemotingCommand, address: str) -> None:
    accepted(response, RequestCode.END_TRANSACTION, address)

"""The half-message calls: what END_TRANSACTION names a half by, and how its answers read."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, ProtocolError
from rocketmq_spark.remoting.sending import SendResult, SendStatus
from rocketmq_spark.remoting.transactions import (
    Half,
    Resolution,
    commit_log_offset,
    end_transaction,
    half_properties,
    stored_half,
)

ADDRESS = "127.0.0.1:10911"
# An offset message id as a 5.3.3 broker on 127.0.0.1:10911 gave one: address, port, offset.
OFFSET_MSG_ID = "7F00000100002A9F00000000000A2B3C"


def test_the_commit_log_offset_is_the_ids_last_sixteen_hex_digits() -> None:
    assert commit_log_offset(OFFSET_MSG_ID) == 0xA2B3C
    # An IPv6 store host makes the id longer; the offset is still its end.
    assert commit_log_offset("20010DB8000000000000000000000001" + "00002A9F" + "0000000000000010") == 16


@pytest.mark.parametrize("bad", ["", "7F000001", "7F00000100002A9F00000000000A2B3G"])
def test_an_id_without_an_offset_is_a_protocol_error(bad: str) -> None:
    with pytest.raises(ProtocolError, match="commit-log offset"):
        commit_log_offset(bad)


def test_a_stored_half_is_named_by_its_answer_and_its_own_id() -> None:
    result = SendResult(SendStatus.SEND_OK, OFFSET_MSG_ID, queue_id=0, queue_offset=7, server_version=0)
    half = stored_half(result, "broker-a", "orders", "UNIQ")
    assert half == Half("broker-a", "orders", 0xA2B3C, 7, "UNIQ")


def test_end_transaction_carries_the_halfs_offsets_group_and_resolution() -> None:
    half = Half("broker-a", "orders", 1234, 7, "UNIQ")
    call = end_transaction(half, "pg", Resolution.ROLLBACK, from_check=True)
    assert call.code == RequestCode.END_TRANSACTION
    assert dict(call.fields) == {
        "producerGroup": "pg",
        "tranStateTableOffset": 7,
        "commitLogOffset": 1234,
        "commitOrRollback": codes.MSG_FLAG_TRANSACTION_ROLLBACK,
        "fromTransactionCheck": True,
        "msgId": "UNIQ",
        "transactionId": "UNIQ",
        "topic": "orders",
        "bname": "broker-a",
    }
    assert Resolution.COMMIT == codes.MSG_FLAG_TRANSACTION_COMMIT == 8
    assert Resolution.ROLLBACK == 12


def test_an_answered_end_reads_as_done_and_a_refusal_as_its_error() -> None:
    call = end_transaction(Half("broker-a", "orders", 1, 0, "U"), "pg", Resolution.COMMIT, from_check=False)
    assert call.read(RemotingCommand(code=ResponseCode.SUCCESS), ADDRESS) is None
    with pytest.raises(BrokerResponseError):
        call.read(
            RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark="Find prepared transaction message failed"), ADDRESS
        )


def test_half_properties_mark_the_send_and_name_the_group() -> None:
    assert half_properties("pg") == {"TRAN_MSG": "true", "PGROUP": "pg"}

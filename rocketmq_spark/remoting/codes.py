"""Numeric constants of RocketMQ's remoting protocol.

Values mirror the Apache RocketMQ sources (``RequestCode``, ``ResponseCode``,
``RemotingSysResponseCode``, ``PullSysFlag``, ``MessageSysFlag``, ``PermName``,
``LanguageCode``, ``SerializeType`` and ``MQVersion``) so that frames built here
are byte-for-byte what a Java client would send.
"""

from __future__ import annotations

import enum
from typing import Final

# --------------------------------------------------------------------------
# Protocol version sent in every request header.
#
# ``version`` is an ordinal of ``MQVersion.Version``; 401 is V4_9_4.
# * From 401 on, the name server answers GET_ROUTEINFO_BY_TOPIC with standard
#   JSON (quoted integer map keys) instead of fastjson's bare ``{0:"ip:port"}``.
# * Up to 475 (V5_3_1) a server that is shutting down still serves the
#   request; above it, the server answers GO_AWAY and the client must move to
#   a new connection. Staying at or below 475 keeps the older, simpler
#   behaviour while GO_AWAY is still handled as a retriable error.
# --------------------------------------------------------------------------
PROTOCOL_VERSION: Final = 401
# The first 5.x release (V5_0_0): a server answering with a lower ``version`` is a 4.x one.
FIRST_5X_VERSION: Final = 412

# --------------------------------------------------------------------------
# Frame header serialization (SerializeType): the high byte of the
# header-length word.
# --------------------------------------------------------------------------
SERIALIZE_JSON: Final = 0
SERIALIZE_ROCKETMQ: Final = 1

# Remoting command flag bits (RemotingCommand.RPC_TYPE / RPC_ONEWAY).
FLAG_RESPONSE: Final = 1 << 0
FLAG_ONEWAY: Final = 1 << 1

# --------------------------------------------------------------------------
# Client language (LanguageCode): JSON headers carry the name, binary
# headers the number.
# --------------------------------------------------------------------------
LANGUAGE_CODES: Final[dict[str, int]] = {
    "JAVA": 0,
    "CPP": 1,
    "DOTNET": 2,
    "PYTHON": 3,
    "DELPHI": 4,
    "ERLANG": 5,
    "RUBY": 6,
    "OTHER": 7,
    "HTTP": 8,
    "GO": 9,
    "PHP": 10,
    "OMS": 11,
    "RUST": 12,
    "NODE_JS": 13,
}
LANGUAGE_NAMES: Final[dict[int, str]] = {code: name for name, code in LANGUAGE_CODES.items()}
LANGUAGE_PYTHON: Final = "PYTHON"
# What the Java decoder assumes when a JSON header has no ``language``.
LANGUAGE_DEFAULT_PEER: Final = "JAVA"

# --------------------------------------------------------------------------
# Request codes (RequestCode).
# --------------------------------------------------------------------------


class RequestCode(enum.IntEnum):
    """Request codes (``RequestCode``); a member prints as its Java name."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_BROKER_CONFIG = 26
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_CONSUMER_RUNNING_INFO = 307
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    LITE_PULL_MESSAGE = 361


# --------------------------------------------------------------------------
# Response codes.
# --------------------------------------------------------------------------


class ResponseCode(enum.IntEnum):
    """Response codes (``RemotingSysResponseCode`` and ``ResponseCode``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002


def response_code_name(code: int) -> str | None:
    """The Java constant name of a response code, or None when unknown."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return None


def request_code_name(code: int) -> str | None:
    """The Java constant name of a request code, or None when unknown."""
    try:
        return RequestCode(code).name
    except ValueError:
        return None


# --------------------------------------------------------------------------
# PULL_MESSAGE request sysFlag bits (PullSysFlag).
# --------------------------------------------------------------------------
PULL_FLAG_COMMIT_OFFSET: Final = 1 << 0
PULL_FLAG_SUSPEND: Final = 1 << 1
PULL_FLAG_SUBSCRIPTION: Final = 1 << 2
PULL_FLAG_CLASS_FILTER: Final = 1 << 3
PULL_FLAG_LITE_PULL: Final = 1 << 4

# --------------------------------------------------------------------------
# Stored message sysFlag bits (MessageSysFlag).
# --------------------------------------------------------------------------
MSG_FLAG_COMPRESSED: Final = 1 << 0
MSG_FLAG_MULTI_TAGS: Final = 1 << 1
MSG_FLAG_TRANSACTION_PREPARED: Final = 1 << 2
MSG_FLAG_TRANSACTION_COMMIT: Final = 2 << 2
MSG_FLAG_TRANSACTION_ROLLBACK: Final = 3 << 2
MSG_FLAG_TRANSACTION_MASK: Final = 3 << 2
MSG_FLAG_BORNHOST_V6: Final = 1 << 4
MSG_FLAG_STOREHOST_V6: Final = 1 << 5
MSG_FLAG_NEED_UNWRAP: Final = 1 << 6
MSG_FLAG_INNER_BATCH: Final = 1 << 7
MSG_COMPRESSION_TYPE_MASK: Final = 7 << 8
MSG_COMPRESSION_TYPE_SHIFT: Final = 8

# Compression type numbers, ``(sysFlag & MASK) >> SHIFT`` (CompressionType).
# Messages written before the type bits existed carry 0 and are zlib.
COMPRESSION_LEGACY_ZLIB: Final = 0
COMPRESSION_LZ4: Final = 1
COMPRESSION_ZSTD: Final = 2
COMPRESSION_ZLIB: Final = 3

# Record magic codes (MessageVersion): V1 has a 1-byte topic length, V2 two.
MESSAGE_MAGIC_V1: Final = 0xDAA320A7
MESSAGE_MAGIC_V2: Final = 0xDAA320AB

# --------------------------------------------------------------------------
# Topic / queue permission bits (PermName).
# --------------------------------------------------------------------------
PERM_INHERIT: Final = 1 << 0
PERM_WRITE: Final = 1 << 1
PERM_READ: Final = 1 << 2
PERM_PRIORITY: Final = 1 << 3

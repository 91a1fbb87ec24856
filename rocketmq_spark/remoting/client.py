"""Typed RocketMQ calls over the remoting protocol: route, pull, offsets, search by time.

Every broker call names its broker in ``bname`` as well as sending to its address: a broker
ignores the field, and a 5.x proxy's remoting port needs it to forward the call. Pulls carry
their subscription (``PULL_FLAG_SUBSCRIPTION``), so no heartbeat or prior registration is needed,
on a broker or through the proxy.

Nothing here retries on its own: every error says whether a retry can help (``retriable``), and
the caller, who knows how much time it has, decides.
"""

from __future__ import annotations

import enum
import ssl
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rocketmq_spark.model import EXPRESSION_TAG, SUBSCRIBE_ALL, ClientConfig, MessageQueue
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.connection import Connection, ConnectionFactory, ConnectionPool, Reply
from rocketmq_spark.remoting.errors import BrokerResponseError, ProtocolError, RocketMQError, error_for_response
from rocketmq_spark.remoting.route import TopicRoute, parse_live_brokers, parse_route
from rocketmq_spark.remoting.signing import sign



class PullStatus(enum.Enum):
    """What a pull found, named as the Java client names it."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # caught up: offset == max offset
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # entries scanned, none matched; go on from next_begin_offset
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # offset outside [min, max]; next_begin_offset is the broker's correction


_PULL_STATUS_BY_CODE = {
    codes.ResponseCode.SUCCESS: PullStatus.FOUND,
    codes.ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    codes.ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    codes.ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class Boundary(enum.Enum):
    """Which offset SEARCH_OFFSET_BY_TIMESTAMP returns for a time."""

    LOWER = "lower"  # the first offset stored at or after the time
    UPPER = "upper"  # the last offset stored at or before the time


@dataclass(frozen=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes  # raw message records, decoded by rocketmq_spark.records.walk


def _accepted(response: RemotingCommand, code: int, address: str, accept: Sequence[int]) -> RemotingCommand:
    """The response, if its code is one the caller handles; else the error it stands for."""
    if response.code not in accept:
        raise error_for_response(response.code, response.remark, request_code=code, address=address)
    return response


def _int_field(response: RemotingCommand, name: str) -> int:
    value = response.ext_fields.get(name)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ProtocolError(
            f"response {response.code} lacks a numeric '{name}' field: {response.ext_fields}"
        ) from err


_PULL_CODES = tuple(_PULL_STATUS_BY_CODE)


class PendingPull:
    """A pull on the wire; ``result()`` waits for the broker's answer."""

    __slots__ = ("_reply", "_address")

    def __init__(self, reply: Reply, address: str) -> None:
        self._reply = reply
        self._address = address

    def result(self) -> PullResult:
        response = _accepted(self._reply.result(), codes.RequestCode.PULL_MESSAGE, self._address, _PULL_CODES)
        return PullResult(
            status=_PULL_STATUS_BY_CODE[response.code],
            next_begin_offset=_int_field(response, "nextBeginOffset"),
            min_offset=_int_field(response, "minOffset"),
            max_offset=_int_field(response, "maxOffset"),
            body=response.body,
        )


def _tls_context() -> ssl.SSLContext:
    # RocketMQ brokers usually serve self-signed certificates, and the Java client trusts any
    # certificate unless told otherwise (tls.test.mode.enable defaults to true); do the same.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class RocketMQClient:
    """A thread-safe client for name servers and brokers (or a 5.x proxy's remoting port)."""

    def __init__(self, config: ClientConfig) -> None:
        if not config.name_servers:
            raise ValueError("at least one name server address is needed")
        self.config = config
        self._tls = _tls_context() if config.tls else None
        self._pool = ConnectionPool(self._connector(reader_thread=True))
        # Pulls go over connections of the calling thread that it reads itself: the answer to a
        # pull then reaches its thread without a hand-over from a reader thread. Held weakly here,
        # so the connections of a thread that ended go with it.
        self._pull_pools = threading.local()
        self._all_pull_pools: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()
        self._pull_pools_lock = threading.Lock()
        self._name_server_lock = threading.Lock()
        self._preferred_name_server = 0

    def close(self) -> None:
        self._pool.close()
        with self._pull_pools_lock:
            pools = list(self._all_pull_pools)
        for pool in pools:
            pool.close()

    def _connector(self, *, reader_thread: bool) -> ConnectionFactory:
        timeout = self.config.request_timeout
        tls = self._tls
        return lambda address: Connection(address, connect_timeout=timeout, tls_context=tls,
                                          reader_thread=reader_thread)

    def _pull_pool(self) -> ConnectionPool:
        pool: ConnectionPool | None = getattr(self._pull_pools, "pool", None)
        if pool is None:
            pool = self._pull_pools.pool = ConnectionPool(self._connector(reader_thread=False))
            with self._pull_pools_lock:
                self._all_pull_pools.add(pool)
        return pool

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- plumbing

    def invoke(
        self,
        address: str,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Send one request (signed when credentials are set) and return the raw response."""
        return self.submit(address, code, fields, body, timeout).result()

    def submit(
        self,
        address: str,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
        *,
        pool: ConnectionPool | None = None,
    ) -> Reply:
        """Send one request (signed when credentials are set) without waiting for the response."""
        command = RemotingCommand.request(code, fields, body)
        creds = self.config.credentials
        if creds is not None:
            command.ext_fields = sign(
                command.ext_fields, body, creds.access_key, creds.secret_key, creds.security_token
            )
        return (pool or self._pool).submit(address, command,
                                           self.config.request_timeout if timeout is None else timeout)

    def _call(
        self,
        address: str,
        code: int,
        fields: Mapping[str, object] | None = None,
        *,
        accept: Sequence[int] = (codes.ResponseCode.SUCCESS,),
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        return _accepted(self.invoke(address, code, fields, body, timeout), code, address, accept)

    # -------------------------------------------------------------- name server

    def topic_route(self, topic: str) -> TopicRoute:
        """The topic's route, asking each name server in turn until one answers."""
        response = self._ask_name_servers(codes.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})
        return parse_route(topic, response.body)

    def live_brokers(self) -> frozenset[str] | None:
        """Brokers registered with the name server now, or None where that cannot be asked (a proxy)."""
        try:
            response = self._ask_name_servers(codes.RequestCode.GET_BROKER_CLUSTER_INFO, {})
        except BrokerResponseError as err:
            if err.code == codes.ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return None
            raise
        return parse_live_brokers(response.body)

    def _ask_name_servers(self, code: int, fields: Mapping[str, object]) -> RemotingCommand:
        """Ask each name server in turn, from the last one that answered, until one answers."""
        servers = self.config.name_servers
        with self._name_server_lock:
            first = self._preferred_name_server
        last_error: RocketMQError | None = None
        for step in range(len(servers)):
            index = (first + step) % len(servers)
            try:
                response = self._call(servers[index], code, fields)
            except RocketMQError as err:
                if not err.retriable:
                    raise
                last_error = err
                continue
            with self._name_server_lock:
                self._preferred_name_server = index
            return response
        assert last_error is not None
        raise last_error

    # ------------------------------------------------------------------- broker

    def pull(
        self,
        address: str,
        queue: MessageQueue,
        offset: int,
        *,
        group: str,
        max_messages: int,
        subscription: str = SUBSCRIBE_ALL,
        expression_type: str = EXPRESSION_TAG,
        suspend_timeout_ms: int = 0,
    ) -> PullResult:
        """Pull up to ``max_messages`` from ``offset``; long-polls when ``suspend_timeout_ms`` > 0."""
        return self.pull_async(
            address, queue, offset, group=group, max_messages=max_messages, subscription=subscription,
            expression_type=expression_type, suspend_timeout_ms=suspend_timeout_ms,
        ).result()

    def pull_async(
        self,
        address: str,
        queue: MessageQueue,
        offset: int,
        *,
        group: str,
        max_messages: int,
        subscription: str = SUBSCRIBE_ALL,
        expression_type: str = EXPRESSION_TAG,
        suspend_timeout_ms: int = 0,
    ) -> PendingPull:
        """Send a pull like :meth:`pull` and return at once; many can be in flight on one
        connection, each answered by ``result()``, which the sending thread must call: pulls go
        over connections of the calling thread that it reads itself."""
        sys_flag = codes.PULL_FLAG_SUBSCRIPTION | (codes.PULL_FLAG_SUSPEND if suspend_timeout_ms > 0 else 0)
        fields = {
            "consumerGroup": group,
            "topic": queue.topic,
            "queueId": queue.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_messages,
            "sysFlag": sys_flag,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_timeout_ms,
            "subscription": subscription,
            "subVersion": 0,
            "expressionType": expression_type,
            "bname": queue.broker_name,
        }
        timeout = self.config.request_timeout + suspend_timeout_ms / 1000
        reply = self.submit(address, codes.RequestCode.PULL_MESSAGE, fields, timeout=timeout, pool=self._pull_pool())
        return PendingPull(reply, address)

    def query_consumer_offset(self, address: str, queue: MessageQueue, group: str) -> int | None:
        """The group's stored offset on the queue (the next to read), or None if nothing is stored.

        ``setZeroIfNotFound=false`` makes a 5.x broker answer QUERY_NOT_FOUND instead of
        guessing 0 for a queue whose first message is still in memory. A 4.9 broker ignores the
        field: there "nothing stored" on such a queue reads as 0, which starts it at its first
        message all the same.
        """
        fields = {
            "consumerGroup": group, "topic": queue.topic, "queueId": queue.queue_id,
            "setZeroIfNotFound": False, "bname": queue.broker_name,
        }
        response = self._call(address, codes.RequestCode.QUERY_CONSUMER_OFFSET, fields,
                              accept=(codes.ResponseCode.SUCCESS, codes.ResponseCode.QUERY_NOT_FOUND))
        if response.code == codes.ResponseCode.QUERY_NOT_FOUND:
            return None
        return _int_field(response, "offset")

    def update_consumer_offset(self, address: str, queue: MessageQueue, group: str, offset: int) -> None:
        """Store ``offset`` (the next offset to read) for the group on the queue."""
        fields = {
            "consumerGroup": group, "topic": queue.topic, "queueId": queue.queue_id,
            "commitOffset": offset, "bname": queue.broker_name,
        }
        self._call(address, codes.RequestCode.UPDATE_CONSUMER_OFFSET, fields)

    def min_offset(self, address: str, queue: MessageQueue) -> int:
        fields = {"topic": queue.topic, "queueId": queue.queue_id, "bname": queue.broker_name}
        return _int_field(self._call(address, codes.RequestCode.GET_MIN_OFFSET, fields), "offset")

    def max_offset(self, address: str, queue: MessageQueue) -> int:
        """The offset the next message will get (one past the last stored)."""
        fields = {"topic": queue.topic, "queueId": queue.queue_id, "committed": True, "bname": queue.broker_name}
        return _int_field(self._call(address, codes.RequestCode.GET_MAX_OFFSET, fields), "offset")

    def search_offset(
        self, address: str, queue: MessageQueue, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        """LOWER: first offset stored at or after the time (max offset if none); UPPER: last at or before."""
        fields = {
            "topic": queue.topic, "queueId": queue.queue_id, "timestamp": timestamp_ms,
            "boundaryType": boundary.value, "bname": queue.broker_name,
        }
        return _int_field(self._call(address, codes.RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields), "offset")

    def earliest_store_time(self, address: str, queue: MessageQueue) -> int:
        fields = {"topic": queue.topic, "queueId": queue.queue_id, "bname": queue.broker_name}
        return _int_field(self._call(address, codes.RequestCode.GET_EARLIEST_MSG_STORETIME, fields), "timestamp")

"""The RocketMQ client: connections to name servers and brokers, and the typed calls over them.

The calls themselves (what each request holds, how its answer reads) are values in ``calls.py``;
this class sends them, one at a time or many at once, signed when credentials are set. Nothing
here retries on its own: every error says whether a retry can help (``retriable``), and the
caller, who knows how much time it has, decides.
"""

from __future__ import annotations

import re
import ssl
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar

from rocketmq_spark.model import MS_PER_SECOND, ClientConfig
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.calls import (
    Boundary,
    Call,
    PullResult,
    PullSpec,
    PullStatus,
    QueueOffsets,
    accepted,
    read_pull,
)
from rocketmq_spark.remoting.codec import Body, RemotingCommand
from rocketmq_spark.remoting.connection import Connection, ServerRequestHandler
from rocketmq_spark.remoting.errors import (
    BrokerResponseError,
    ConnectionFailedError,
    NameServersUnavailableError,
    RequestTimeoutError,
    RocketMQError,
    TransportError,
)
from rocketmq_spark.remoting.pool import ConnectionFactory, ConnectionPool
from rocketmq_spark.remoting.route import TopicRoute, parse_live_brokers, parse_route
from rocketmq_spark.remoting.signing import sign
from rocketmq_spark.remoting.templates import PullTemplates
from rocketmq_spark.remoting.tls import certificate_error, client_context

__all__ = ["Boundary", "PendingPull", "PullResult", "PullSpec", "PullStatus", "QueueOffsets", "RocketMQClient"]

T = TypeVar("T")
A = TypeVar("A")

# Requests one call_many keeps unanswered at once. A 5.x proxy drops answers it cannot write at
# once (its channel's write buffer is full), so the window stays well below what fills it.
DEFAULT_WINDOW = 64


# What stands for the access key in a server's answer: brokers name the user they refuse.
HIDDEN_ACCESS_KEY = "<accessKey>"


class Answer(Protocol):
    """A response to come."""

    def result(self) -> RemotingCommand: ...


class ReadLater(Generic[A, T]):
    """A response to come and how to read it: ``read(response, context)`` once ``result()`` is
    asked for, with what the reading needs besides the response (the server's address, say)."""

    __slots__ = ("_reply", "_read", "_context")

    def __init__(self, reply: Answer, read: Callable[[RemotingCommand, A], T], context: A) -> None:
        self._reply = reply
        self._read = read
        self._context = context

    def result(self) -> T:
        return self._read(self._reply.result(), self._context)


# A pull on the wire; ``result()`` waits for the broker's answer and reads it. A type only: a pull
# is made as ReadLater, since calling a subscripted generic costs several times more per pull.
PendingPull = ReadLater[str, PullResult]


def _scrubbed(response: RemotingCommand, access_key: str) -> RemotingCommand:
    """The response with a remark that never shows the access key, so no error or log line
    repeats it."""
    if response.remark and access_key and access_key in response.remark:
        # As a whole token only: a key that is also part of a word ("cons" in "consumer") must
        # not garble the rest of the message.
        token = re.compile(rf"(?<![\w-]){re.escape(access_key)}(?![\w-])")
        response.remark = token.sub(HIDDEN_ACCESS_KEY, response.remark)
    return response


class RocketMQClient:
    """A thread-safe client for name servers and brokers (or a 5.x proxy's remoting port)."""

    def __init__(self, config: ClientConfig) -> None:
        if not config.name_servers:
            raise ValueError("at least one name server address is needed")
        self.config = config
        self._tls = client_context(config)
        self._on_request: ServerRequestHandler | None = None
        self._pool = ConnectionPool(self._connector(reader_thread=True))
        # Pulls go over connections of the calling thread that it reads itself: the answer to a
        # pull then reaches its thread without a hand-over from a reader thread. Held weakly here,
        # so the connections of a thread that ended go with it.
        self._pull_pools = threading.local()
        self._all_pull_pools: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()
        self._pull_pools_lock = threading.Lock()
        self._name_server_lock = threading.Lock()
        self._preferred_name_server = 0
        self._requests_sent = 0
        self._pull_templates = PullTemplates()

    @property
    def requests_sent(self) -> int:
        """Requests this client has sent so far: what benchmarks and tests count."""
        return self._requests_sent

    def connections_opened(self, address: str) -> int:
        """Connections opened to the address for requests other than pulls (see ConnectionPool.opened)."""
        return self._pool.opened(address)

    def serve(self, handler: ServerRequestHandler | None) -> None:
        """Answer the requests servers send on their own on this client's connections (not the
        pulls'): where a consumer group member is registered, a broker asks it things."""
        self._on_request = handler

    def _server_request(self, request: RemotingCommand) -> RemotingCommand | None:
        handler = self._on_request
        return None if handler is None else handler(request)

    def close(self) -> None:
        self._pool.close()
        with self._pull_pools_lock:
            pools = list(self._all_pull_pools)
        for pool in pools:
            pool.close()

    def _connector(self, *, reader_thread: bool) -> ConnectionFactory:
        config, tls = self.config, self._tls
        served = self._server_request if reader_thread else None

        def connect(address: str) -> Connection:
            try:
                return Connection(
                    address,
                    connect_timeout=config.connect_timeout,
                    tls_context=tls,
                    reader_thread=reader_thread,
                    on_request=served,
                )
            except ConnectionFailedError as err:
                if isinstance(err.__cause__, ssl.SSLCertVerificationError):
                    raise certificate_error(address, err.__cause__, config) from err.__cause__
                raise

        return connect

    def _pull_pool(self) -> ConnectionPool:
        pool: ConnectionPool | None = getattr(self._pull_pools, "pool", None)
        if pool is None:
            pool = self._pull_pools.pool = ConnectionPool(self._connector(reader_thread=False))
            with self._pull_pools_lock:
                self._all_pull_pools.add(pool)
        return pool

    @contextmanager
    def pulls_together(self) -> Iterator[None]:
        """Pulls this thread sends inside go out together at its end, one write per broker: fewer
        system calls here, and fewer wake-ups of the broker, than a write per pull."""
        with self._pull_pool().sending_together():
            yield

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
        body: Body = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Send one raw request and return the raw response, whatever its code (for requests no
        typed call describes: tooling and tests)."""
        return self._send(address, RemotingCommand.request(code, fields, body), timeout).result()

    def submit(self, address: str, call: Call[object], timeout: float | None = None) -> Answer:
        """Send one typed call without waiting for its response (``call.read`` reads it)."""
        return self._send(address, RemotingCommand.request(call.code, call.fields, call.body), timeout)

    def _send(
        self, address: str, command: RemotingCommand, timeout: float | None, pool: ConnectionPool | None = None
    ) -> Answer:
        """Send one request, signed when credentials are set, over ``pool`` (the control pool by
        default)."""
        self._requests_sent += 1
        creds = self.config.credentials
        if creds is not None:
            body = command.body_parts or command.body
            command.ext_fields = sign(
                command.ext_fields, body, creds.access_key, creds.secret_key, creds.security_token
            )
        reply = (pool or self._pool).submit(
            address, command, self.config.request_timeout if timeout is None else timeout
        )
        return reply if creds is None else ReadLater(reply, _scrubbed, creds.access_key)

    def _call(self, address: str, code: int, fields: Mapping[str, object] | None = None) -> RemotingCommand:
        return accepted(self.invoke(address, code, fields), code, address)

    def call(self, address: str, call: Call[T], timeout: float | None = None) -> T:
        """Send one typed call and read its answer."""
        return call.read(self.submit(address, call, timeout).result(), address)

    def call_many(
        self, addressed: Sequence[tuple[str, Call[T]]], window: int = DEFAULT_WINDOW
    ) -> list[T | RocketMQError]:
        """Send many calls back to back, at most ``window`` unanswered at once, and return each
        one's value or the error it met, in order. An address that cannot be reached, or left a
        call unanswered past the request timeout (a stalled or hung server), fails its remaining
        calls at once instead of costing a timeout for each window of them."""
        outcomes: list[T | RocketMQError | None] = [None] * len(addressed)
        unreachable: dict[str, TransportError] = {}
        in_flight: deque[tuple[int, str, Call[T], Answer]] = deque()

        def settle_oldest() -> None:
            index, address, call, reply = in_flight.popleft()
            try:
                outcomes[index] = call.read(reply.result(), address)
            except RequestTimeoutError as err:
                unreachable.setdefault(address, err)
                outcomes[index] = err
            except RocketMQError as err:
                outcomes[index] = err

        for index, (address, call) in enumerate(addressed):
            if len(in_flight) >= window:
                settle_oldest()
            if address in unreachable:
                outcomes[index] = unreachable[address]
                continue
            try:
                in_flight.append((index, address, call, self.submit(address, call)))
            except ConnectionFailedError as err:
                unreachable[address] = outcomes[index] = err
            except RocketMQError as err:
                outcomes[index] = err
        while in_flight:
            settle_oldest()
        return outcomes  # type: ignore[return-value]

    # -------------------------------------------------------------- name server

    def topic_route(self, topic: str) -> TopicRoute:
        """The topic's route, asking each name server in turn until one answers."""
        response = self._ask_name_servers(
            codes.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True}
        )
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
        """Ask each name server in turn, from the last one that answered, until one answers; if none
        does, the error says what each one did."""
        servers = self.config.name_servers
        with self._name_server_lock:
            first = self._preferred_name_server
        answers: dict[str, RocketMQError] = {}
        for step in range(len(servers)):
            index = (first + step) % len(servers)
            try:
                response = self._call(servers[index], code, fields)
            except RocketMQError as err:
                if not err.retriable:
                    raise
                answers[servers[index]] = err
                continue
            with self._name_server_lock:
                self._preferred_name_server = index
            return response
        raise NameServersUnavailableError(answers)

    # ------------------------------------------------------------------- broker

    def pull_async(self, address: str, spec: PullSpec, offset: int, max_messages: int) -> PendingPull:
        """Pull up to ``max_messages`` from ``offset`` (long-polling when the spec says so) and return
        at once. Many can be in flight on one connection, each answered by ``result()``, which the
        sending thread must call: pulls go over connections of the calling thread that it reads
        itself."""
        timeout = self.config.request_timeout + spec.suspend_timeout_ms / MS_PER_SECOND
        if self.config.credentials is None:  # a signature covers every field: signed pulls are built whole
            request = self._pull_templates.request(spec, offset, max_messages)
            self._requests_sent += 1
            return ReadLater(self._pull_pool().submit(address, request, timeout), read_pull, address)
        fields = calls.pull_fields(spec, offset, max_messages)
        command = RemotingCommand.request(codes.RequestCode.PULL_MESSAGE, fields)
        reply = self._send(address, command, timeout, self._pull_pool())
        return ReadLater(reply, read_pull, address)

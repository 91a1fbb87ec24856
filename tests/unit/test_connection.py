"""The connection and the pool against a scripted in-process server: answers matched to requests by
opaque whatever their order, timeouts, a server that goes away, GO_AWAY, server-initiated requests;
with a reader thread and with the waiting caller reading.

The integration tests run the same code against the real broker and proxy; this one makes the
server misbehave on purpose.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rocketmq_spark.remoting import codes, connection
from rocketmq_spark.remoting.codec import FrameReader, RemotingCommand, encode_frame
from rocketmq_spark.remoting.connection import CONNECTION_MAX_IDLE_S, Connection
from rocketmq_spark.remoting.errors import ConnectionFailedError, RequestTimeoutError
from rocketmq_spark.remoting.pool import ConnectionPool

# A handler sees each request and says what to send back: commands (answers, or requests of the
# server's own), nothing (leave it unanswered), or CLOSE; commands then CLOSE close after sending.
CLOSE = object()
Handler = Callable[[RemotingCommand, list[RemotingCommand]], object]


def answer(request: RemotingCommand, code: int = codes.ResponseCode.SUCCESS, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, opaque=request.opaque, flag=codes.FLAG_RESPONSE, ext_fields=dict(fields))


class ScriptedServer:
    """Accepts connections on loopback; each connection's requests go to ``handler`` in order."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted = 0
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        frames = FrameReader()
        held: list[RemotingCommand] = []  # requests seen on this connection, for handlers that batch
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for request in frames.feed(data):
                    outcome = self.handler(request, held)
                    if outcome is CLOSE:
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    for command in outcome or ():  # type: ignore[attr-defined]
                        if command is CLOSE:
                            conn.shutdown(socket.SHUT_RDWR)
                            return
                        conn.sendall(encode_frame(command))

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        server = ScriptedServer(handler)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture(params=[True, False], ids=["reader-thread", "caller-reads"])
def reader_thread(request: pytest.FixtureRequest) -> bool:
    """Both ways a connection receives: its own reader thread, or the waiting caller."""
    return bool(request.param)


def connect(server: ScriptedServer, reader_thread: bool) -> Connection:
    return Connection(server.address, connect_timeout=2.0, reader_thread=reader_thread)


def request(code: int = codes.RequestCode.GET_MAX_OFFSET, **fields: str) -> RemotingCommand:
    return RemotingCommand.request(code, fields)


def test_answers_in_reverse_order_reach_their_own_requests(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    def reverse_every_four(req: RemotingCommand, held: list[RemotingCommand]) -> list[RemotingCommand]:
        held.append(req)
        if len(held) < 4:
            return []
        answers = [answer(r, n=r.ext_fields["n"]) for r in reversed(held)]
        held.clear()
        return answers

    conn = connect(serve(reverse_every_four), reader_thread)
    pending = [conn.submit(request(n=str(i)), timeout=5.0) for i in range(8)]
    assert [conn.wait(p).ext_fields["n"] for p in pending] == [str(i) for i in range(8)]
    conn.close()


def test_an_unanswered_request_times_out_and_a_connection_that_answers_others_stays_usable(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    conn = connect(serve(lambda req, _: [] if req.ext_fields.get("ignore") else [answer(req)]), reader_thread)
    ignored = conn.submit(request(ignore="yes"), timeout=0.5)
    assert conn.request(request(), timeout=5.0).code == codes.ResponseCode.SUCCESS  # heard after it was sent
    with pytest.raises(RequestTimeoutError, match="within 0.5s") as failure:
        conn.wait(ignored)
    assert failure.value.retriable
    assert not conn.closed
    assert conn.request(request(), timeout=5.0).code == codes.ResponseCode.SUCCESS
    conn.close()


def test_a_connection_silent_for_a_whole_timeout_is_closed_and_the_pool_opens_another(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    """A connection that a firewall or NAT dropped without a word looks like this: every request
    would wait out its timeout on it, so it is closed and the next request goes on a new one."""
    silent = {"on": True}
    server = serve(lambda req, _: [] if silent["on"] else [answer(req)])
    pool = ConnectionPool(lambda address: Connection(address, connect_timeout=2.0, reader_thread=reader_thread))
    with pytest.raises(RequestTimeoutError, match="within 0.2s") as failure:
        pool.request(server.address, request(), timeout=0.2)
    assert failure.value.retriable
    silent["on"] = False
    assert pool.request(server.address, request(), timeout=5.0).code == codes.ResponseCode.SUCCESS
    assert pool.opened(server.address) == 2
    pool.close()


def test_a_server_that_goes_away_fails_every_waiting_request(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    def close_on_third(req: RemotingCommand, held: list[RemotingCommand]) -> object:
        held.append(req)
        return CLOSE if len(held) == 3 else []

    conn = connect(serve(close_on_third), reader_thread)
    pending = [conn.submit(request(), timeout=5.0) for _ in range(3)]
    for p in pending:
        with pytest.raises(ConnectionFailedError) as failure:
            conn.wait(p)
        assert failure.value.retriable
    assert conn.closed
    with pytest.raises(ConnectionFailedError):
        conn.submit(request(), timeout=5.0)


def test_the_pool_reconnects_after_a_failure_and_after_go_away(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    def script(req: RemotingCommand, _: list[RemotingCommand]) -> object:
        action = req.ext_fields.get("action")
        if action == "close":
            return CLOSE
        if action == "go-away":
            return [answer(req, code=codes.ResponseCode.GO_AWAY)]
        return [answer(req)]

    server = serve(script)
    pool = ConnectionPool(lambda address: Connection(address, connect_timeout=2.0, reader_thread=reader_thread))
    assert pool.opened(server.address) == 0
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert pool.opened(server.address) == 1
    with pytest.raises(ConnectionFailedError):
        pool.request(server.address, request(action="close"), 5.0)
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert pool.request(server.address, request(action="go-away"), 5.0).code == codes.ResponseCode.GO_AWAY
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert server.accepted == 3  # first, after the close, after GO_AWAY
    assert pool.opened(server.address) == 3  # what tells the driver that a broker may have restarted
    pool.close()


def test_requests_from_the_server_are_ignored(serve: Callable[[Handler], ScriptedServer], reader_thread: bool) -> None:
    def notify_then_answer(req: RemotingCommand, _: list[RemotingCommand]) -> list[RemotingCommand]:
        # Same opaque as the request, but a request: it must not be taken for the answer.
        notify = RemotingCommand(code=codes.RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, opaque=req.opaque)
        return [notify, answer(req, n="the answer")]

    conn = connect(serve(notify_then_answer), reader_thread)
    assert conn.request(request(), timeout=5.0).ext_fields == {"n": "the answer"}
    conn.close()


def test_a_request_from_the_server_is_answered_by_the_handler_on_the_same_connection(
    serve: Callable[[Handler], ScriptedServer],
) -> None:
    """How a broker asks a registered group member for its running info: the handler's answer goes
    back with the request's opaque, marked as a response; a one-way notice gets no answer."""
    answers: list[RemotingCommand] = []

    def ask_then_answer(req: RemotingCommand, _: list[RemotingCommand]) -> list[RemotingCommand]:
        if req.is_response:  # the client's answer to the server's request
            answers.append(req)
            return []
        notice = RemotingCommand(
            code=codes.RequestCode.RESET_CONSUMER_CLIENT_OFFSET, opaque=900, flag=codes.FLAG_ONEWAY
        )
        ask = RemotingCommand(code=codes.RequestCode.GET_CONSUMER_RUNNING_INFO, opaque=901)
        return [notice, ask, answer(req)]

    seen: list[int] = []

    def handler(request: RemotingCommand) -> RemotingCommand:
        seen.append(request.code)
        return RemotingCommand(code=codes.ResponseCode.SUCCESS, body=b"info")

    server = serve(ask_then_answer)
    conn = Connection(server.address, connect_timeout=5.0, on_request=handler)
    assert conn.request(request(), timeout=5.0).code == codes.ResponseCode.SUCCESS
    conn.request(request(), timeout=5.0)  # the server reads the client's answer before this one
    conn.close()
    assert seen[:2] == [codes.RequestCode.RESET_CONSUMER_CLIENT_OFFSET, codes.RequestCode.GET_CONSUMER_RUNNING_INFO]
    (first, *_) = answers
    assert (first.opaque, first.is_response, first.body) == (901, True, b"info")


def test_many_threads_share_one_connection(serve: Callable[[Handler], ScriptedServer]) -> None:
    conn = connect(serve(lambda req, _: [answer(req, n=req.ext_fields["n"])]), reader_thread=True)
    results: dict[int, str] = {}

    def ask(i: int) -> None:
        for j in range(50):
            assert conn.request(request(n=f"{i}-{j}"), timeout=5.0).ext_fields["n"] == f"{i}-{j}"
        results[i] = "done"

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    conn.close()


def test_a_caller_reading_keeps_answers_to_requests_it_waits_for_later(
    serve: Callable[[Handler], ScriptedServer],
) -> None:
    """Reading for one request may receive others' answers; they wait in their pending entries,
    and the answer to a request nobody waits for does not get in the way."""

    def hold_the_first_three(req: RemotingCommand, held: list[RemotingCommand]) -> list[RemotingCommand]:
        held.append(req)
        if len(held) < 3:
            return []
        answers = [answer(r, n=r.ext_fields["n"]) for r in held]
        held.clear()
        held.extend([req] * 3)  # from now on, every request is answered at once
        return answers[-1:] if len(answers) > 3 else answers

    conn = connect(serve(hold_the_first_three), reader_thread=False)
    first, second, third = (conn.submit(request(n=str(i)), timeout=5.0) for i in range(3))
    assert conn.wait(first).ext_fields["n"] == "0"
    assert conn.wait(third).ext_fields["n"] == "2"  # past the second's answer, kept or not yet read
    # ``second`` is never waited for; the connection goes on answering the next requests.
    assert conn.request(request(n="3"), timeout=5.0).ext_fields["n"] == "3"
    assert conn.request(request(n="4"), timeout=5.0).ext_fields["n"] == "4"
    conn.close()


# ------------------------------------------------------------------ idle and closed connections

# How long a test waits for what a socket is sure to see soon (a close reaching the other end).
SETTLE_S = 10.0


def backdate(conn: Connection, seconds: float) -> None:
    """Make the connection's last traffic ``seconds`` older, as if it had sat idle that long."""
    conn._last_heard -= seconds
    conn._last_sent -= seconds


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_a_connection_idle_past_the_limit_is_replaced_before_use(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    """The server would close it about now (RocketMQ's do after 120 s): a request sent on it could
    be lost with everything else in flight, so the pool opens another first."""
    server = serve(lambda req, _: [answer(req)])
    pool = ConnectionPool(lambda address: Connection(address, connect_timeout=2.0, reader_thread=reader_thread))
    first = pool.get(server.address)
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    backdate(first, CONNECTION_MAX_IDLE_S - 1)
    assert pool.get(server.address) is first  # not idle for long enough yet
    backdate(first, 2)
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert first.closed and pool.opened(server.address) == 2 and server.accepted == 2
    pool.close()


def test_a_connection_waiting_for_an_answer_is_not_idle(serve: Callable[[Handler], ScriptedServer]) -> None:
    """A long poll is traffic to come: only requests past their deadline stop counting."""
    conn = connect(serve(lambda req, _: []), reader_thread=False)
    pending = conn.submit(request(), timeout=CONNECTION_MAX_IDLE_S * 10)
    backdate(conn, CONNECTION_MAX_IDLE_S * 2)
    assert conn.idle_for() == 0 and conn.usable()
    pending.deadline = time.monotonic() - 1  # given up on
    assert conn.idle_for() > CONNECTION_MAX_IDLE_S and not conn.usable()
    conn.close()


def test_idle_connections_to_other_addresses_are_closed_when_one_is_asked_for(
    serve: Callable[[Handler], ScriptedServer],
) -> None:
    """A worker process keeps its pools between tasks: a broker it no longer reads from does not
    leave it a socket the broker has given up on."""
    first, second = serve(lambda req, _: [answer(req)]), serve(lambda req, _: [answer(req)])
    pool = ConnectionPool(
        lambda address: Connection(address, connect_timeout=2.0, reader_thread=False), sweep_every_s=0
    )
    stale = pool.get(first.address)
    pool.request(second.address, request(), 5.0)
    assert not stale.closed
    backdate(stale, CONNECTION_MAX_IDLE_S + 1)
    pool.request(second.address, request(), 5.0)
    assert stale.closed
    pool.close()


def test_a_connection_the_server_closed_is_noticed_before_a_request_is_sent_on_it(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    """Without a reader thread nobody reads the close until the next request, which would be lost
    on the half-closed socket: the pool looks first, and the request goes on a new connection."""
    server = serve(lambda req, _: [answer(req), CLOSE] if req.ext_fields.get("last") else [answer(req)])
    pool = ConnectionPool(lambda address: Connection(address, connect_timeout=2.0, reader_thread=reader_thread))
    closing = pool.get(server.address)
    assert pool.request(server.address, request(last="yes"), 5.0).code == codes.ResponseCode.SUCCESS
    wait_until(lambda: not closing.usable())
    assert pool.request(server.address, request(), 5.0).code == codes.ResponseCode.SUCCESS
    assert closing.closed and pool.opened(server.address) == 2
    pool.close()


def test_unread_answers_are_not_taken_for_a_close(serve: Callable[[Handler], ScriptedServer]) -> None:
    """Answers to pulls nobody waits for any more wait in the socket: it is still open."""
    conn = connect(serve(lambda req, _: [answer(req)]), reader_thread=False)
    conn.submit(request(), timeout=5.0)
    wait_until(lambda: bool(select.select([conn._raw_sock], [], [], 0)[0]))  # the answer is in
    assert conn.usable()
    assert conn.request(request(), timeout=5.0).code == codes.ResponseCode.SUCCESS
    conn.close()


def test_close_waits_for_a_stuck_reader_thread_for_a_bounded_time(
    serve: Callable[[Handler], ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing the socket ends the reader's receive; a reader stuck elsewhere does not hold up
    close(), which gives up on it after READER_JOIN_TIMEOUT_S (a daemon, it ends with the process)."""
    release = threading.Event()
    monkeypatch.setattr(Connection, "_read_loop", lambda self: release.wait())
    monkeypatch.setattr(connection, "READER_JOIN_TIMEOUT_S", 0.01)
    conn = connect(serve(lambda req, _: [answer(req)]), reader_thread=True)
    conn.close()
    assert conn.closed
    assert conn._reader is not None and conn._reader.is_alive()  # close() returned without it
    release.set()
    conn._reader.join()


# ------------------------------------------------------------------ requests sent together

# How long a test gives a request that should not have been sent to reach the server anyway.
NOT_SENT_S = 0.2


def test_held_requests_go_out_at_release_and_each_gets_its_own_answer(
    serve: Callable[[Handler], ScriptedServer], reader_thread: bool
) -> None:
    """A task's pulls go out in one write: nothing before the release, every answer after it."""
    seen: list[str] = []

    def record(req: RemotingCommand, _: list[RemotingCommand]) -> list[RemotingCommand]:
        seen.append(req.ext_fields["n"])
        return [answer(req, n=req.ext_fields["n"])]

    conn = connect(serve(record), reader_thread)
    conn.hold_sends()
    pending = [conn.submit(request(n=str(i)), timeout=5.0) for i in range(3)]
    time.sleep(NOT_SENT_S)
    assert seen == []
    conn.release_sends()
    assert [conn.wait(p).ext_fields["n"] for p in pending] == ["0", "1", "2"]
    assert seen == ["0", "1", "2"]
    # Released, the next request goes out at once.
    assert conn.request(request(n="3"), timeout=5.0).ext_fields["n"] == "3"
    conn.close()


def test_a_pool_sends_together_on_every_connection_it_used(serve: Callable[[Handler], ScriptedServer]) -> None:
    """One write per broker for the pulls a task sends back to back, whichever brokers they go to."""
    seen: list[str] = []

    def record(req: RemotingCommand, _: list[RemotingCommand]) -> list[RemotingCommand]:
        seen.append(req.ext_fields["n"])
        return [answer(req, n=req.ext_fields["n"])]

    first, second = serve(record), serve(record)
    pool = ConnectionPool(lambda address: Connection(address, connect_timeout=2.0, reader_thread=False))
    with pool.sending_together():
        replies = [
            pool.submit(server.address, request(n=f"{name}{i}"), 5.0)
            for i in range(2)
            for name, server in (("a", first), ("b", second))
        ]
        time.sleep(NOT_SENT_S)
        assert seen == []
    assert sorted(reply.result().ext_fields["n"] for reply in replies) == ["a0", "a1", "b0", "b1"]
    assert pool.request(first.address, request(n="after"), 5.0).ext_fields["n"] == "after"
    pool.close()


def test_held_requests_on_a_connection_that_failed_fail_instead_of_waiting(
    serve: Callable[[Handler], ScriptedServer],
) -> None:
    """A connection lost before its held requests went out fails them at once, like a send that
    failed: the caller's retry takes over, nobody waits for a timeout."""
    conn = connect(serve(lambda req, _: [answer(req)]), reader_thread=False)
    conn.hold_sends()
    pending = conn.submit(request(), timeout=30.0)
    conn._raw_sock.shutdown(socket.SHUT_RDWR)  # the network drops it before the release
    conn.release_sends()
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError):
        conn.wait(pending)
    assert time.monotonic() - started < NOT_SENT_S * 10
    conn.close()

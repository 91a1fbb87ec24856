"""The exceptions of the client and the decoders (``rocketmq_spark.config.errors`` adds the one
of a user option).

Each class says, through ``retriable``, whether repeating the operation (possibly
on a fresh connection) can succeed, so callers decide on retries without
inspecting messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rocketmq_spark.remoting import codes, grants


class RocketMQError(Exception):
    """Base of all project errors."""

    retriable: bool = False
    # The server the failure concerns, where there is one: retries are logged by it.
    address: str | None = None


class TransportError(RocketMQError):
    """A request got no answer from its server because of the way there, not the server's say:
    retriable, as a fresh connection or a later try can get through."""

    retriable = True

    def __init__(self, message: str, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


class ConnectionFailedError(TransportError):
    """A connection could not be opened, or was lost mid-request."""


class CertificateError(ConnectionFailedError):
    """A server's TLS certificate failed verification (unknown CA, wrong name, expired).

    Not retriable: the server presents the same certificate to the next attempt.
    """

    retriable = False

    def __init__(self, address: str, reason: str, fix: str) -> None:
        super().__init__(f"TLS certificate of {address} rejected: {reason}. {fix}", address)
        self.reason = reason


class RequestTimeoutError(TransportError):
    """A request got no answer in time."""


class NameServersUnavailableError(RocketMQError):
    """No name server of the list answered; the message says what each one did.

    Retriable like its parts: a name server may be restarting. At a query's start the short
    policy gives up on it within seconds.
    """

    retriable = True

    def __init__(self, answers: Mapping[str, RocketMQError]) -> None:
        self.answers = dict(answers)
        self.address = ";".join(self.answers)
        tried = "; ".join(
            str(error) if address in str(error) else f"{address}: {error}" for address, error in self.answers.items()
        )
        super().__init__(
            f"no name server answered ({tried}). Check the nameServer option, and that the name servers "
            "run and can be reached from here"
        )


class ProtocolError(RocketMQError):
    """The peer sent a malformed frame, header or message record.

    Not retriable: the same bytes will be malformed again, and a stream that
    lost its framing cannot be resynchronised.
    """


class BodyTooLargeError(ProtocolError):
    """A message body decompresses past the bound a task allows.

    ``facts`` names the message and the sizes; ``fix`` says what to do, in the words of whoever
    set the bound: the decoders know a number, the layer above the option that set it
    (``with_fix``).
    """

    def __init__(self, facts: str, fix: str) -> None:
        super().__init__(f"{facts}. {fix}")
        self.facts = facts
        self.fix = fix

    def with_fix(self, fix: str) -> BodyTooLargeError:
        """The same failure with another fix."""
        return BodyTooLargeError(self.facts, fix)


class DataLossError(RocketMQError):
    """Offsets a query needs no longer exist on the broker."""


class OffsetNotServedError(RocketMQError):
    """A broker keeps answering pulls of an offset without serving it or saying it is gone: the
    read stops rather than skip it. The message names the queue, the offset and the answer."""


class IndexMismatchError(RocketMQError):
    """A broker's consume queue and its messages disagree on where a message is: a pull of one
    offset returns a message stored as another. Reading on would put rows at the wrong offsets and
    skip or repeat messages, so the read stops. The message names the queue and both offsets."""

    @classmethod
    def at(cls, queue: object, offset: int, stored_as: int) -> IndexMismatchError:
        return cls(
            f"{queue}: the broker's consume queue and its messages disagree: offset {offset} holds the message "
            f"stored as offset {stored_as} ({stored_as - offset:+d}). RocketMQ's store logs this as '[BUG]logic "
            "queue order maybe wrong' (seen on a DLedger replica restarted and then elected master). Reading on "
            "would give rows the wrong offsets and skip or repeat messages, so the read stops whatever "
            "failOnDataLoss says: the queue can be read again once the broker's consume queue agrees with its "
            "commit log (docs/operations.md#failures)"
        )


class OffsetResetError(RocketMQError):
    """An operator reset the group's offsets under a query that was told to stop then."""


class NoReplicaError(RocketMQError):
    """No replica of a broker name serves a queue now: its master is down and no slave is listed,
    or every listed replica failed or refused. Retriable: a new master or a slave that catches up
    serves it again, and a planned range cannot finish without it."""

    retriable = True

    def __init__(self, broker: str, tried: list[str], cause: RocketMQError | None = None) -> None:
        self.broker = broker
        self.tried = list(tried)
        where = f"tried {', '.join(self.tried)}" if self.tried else "no replica of it is registered"
        because = f": {cause}" if cause is not None else ""
        super().__init__(f"no replica of broker {broker} serves its queues now ({where}){because}")


class QueueNotReadableError(RocketMQError):
    """A broker refuses to serve a queue it has (INVALID_PARAMETER, "queueId[N] is illegal"): its
    ``readQueueNums`` was lowered, or read permission taken away, after a batch was planned on it.
    Retriable: the batch must read what it planned, which the broker serves again once the queue
    is readable again."""

    retriable = True

    def __init__(self, queue: str, cause: BrokerResponseError) -> None:
        self.cause = cause
        super().__init__(
            f"{queue} is not readable on its broker now ({cause.remark}), but a micro-batch planned before that "
            "reads it. Make the queue readable again (readQueueNums, the topic's permission) for the batch to "
            "finish; lower writeQueueNums first and let the query drain a queue before hiding it"
        )

    @staticmethod
    def refused(error: BrokerResponseError) -> bool:
        """Whether a pull's error is the broker refusing a queue it does not let anyone read now."""
        return error.code == codes.ResponseCode.INVALID_PARAMETER and "is illegal" in (error.remark or "")


class BrokersUnreachableError(RocketMQError):
    """Every broker of a running stream's topics is registered but none has answered for the
    retry budget: nothing can be read."""

    def __init__(self, brokers: list[str], budget_s: float, cause: RocketMQError) -> None:
        self.brokers = brokers
        super().__init__(
            f"brokers {', '.join(brokers)} are registered with the name server but have not answered for "
            f"{budget_s:g} s (retryBudgetMs), and no other broker serves the topic: {cause}. Check that they run "
            "and can be reached from the driver, or raise retryBudgetMs to wait longer"
        )


# Codes after which the same request can succeed later: the server is busy or
# is going away and asks the client to use another connection. FLOW_CONTROL is
# the busy signal the Java pull consumers back off on.
RETRIABLE_RESPONSE_CODES: frozenset[int] = frozenset(
    {codes.ResponseCode.SYSTEM_BUSY, codes.ResponseCode.FLOW_CONTROL, codes.ResponseCode.GO_AWAY}
)


class BrokerResponseError(RocketMQError):
    """A name server, broker or proxy answered with a non-success code.

    The numeric code is always kept (and printed), so codes unknown to this
    client are never lost.
    """

    def __init__(
        self,
        code: int,
        remark: str | None,
        *,
        request_code: int | None = None,
        address: str | None = None,
    ) -> None:
        self.code = code
        self.remark = remark
        self.request_code = request_code
        self.address = address
        self.retriable = code in RETRIABLE_RESPONSE_CODES
        super().__init__(self._describe())

    def _describe(self) -> str:
        name = codes.response_code_name(self.code)
        text = f"{name} ({self.code})" if name else f"response code {self.code}"
        if self.request_code is not None:
            text += f" to request {self.request_code}"
        if self.address:
            text += f" from {self.address}"
        if self.remark:
            text += f": {self.remark}"
        return text


class AuthenticationError(BrokerResponseError):
    """The server rejected the credentials or the signature, or denied access."""

    @property
    def refuses_user(self) -> bool:
        """Whether the user was refused (credentials, signature, a grant), which no retry
        changes; NO_PERMISSION also says a broker takes no sends for a topic, where another
        broker may."""
        return bool(self.remark and _AUTH_FAILURE_REMARK.search(self.remark))


class AuthorizationError(AuthenticationError):
    """The user is known but lacks a grant on a resource: the message ends with the grant line.

    An AuthenticationError too, so that whoever stops on a refused user stops on this as well.
    """

    def __init__(
        self,
        denied: grants.Denial,
        code: int,
        remark: str | None,
        *,
        request_code: int | None = None,
        address: str | None = None,
    ) -> None:
        self.denial = denied
        super().__init__(code, remark, request_code=request_code, address=address)

    def _describe(self) -> str:
        return f"{super()._describe().rstrip()} {self.denial.advice()}"


class TopicNotFoundError(BrokerResponseError):
    """The topic does not exist on the server that answered."""


# Messages of auth/authentication and auth/authorization exceptions, and the
# class name of 4.x plain-ACL exceptions (see error_for_response).
_AUTH_FAILURE_REMARK = re.compile(
    r"check signature failed"
    r"|AclException"
    r"|authentication"
    r"|^User:.* is (?:not found|disabled)"
    r"|username cannot be null"
    r"|has no permission to access"
    r"|No default permission for",
    re.IGNORECASE,
)


def error_for_response(
    code: int,
    remark: str | None,
    *,
    request_code: int | None = None,
    address: str | None = None,
) -> BrokerResponseError:
    """The most specific error class for a non-success response.

    How servers answer a bad signature, an unknown or disabled user, or a
    denied resource:

    * Broker 5.3.x, ACL 2.0: ``broker/auth/pipeline/AuthenticationPipeline``
      and ``AuthorizationPipeline`` turn ``AuthenticationException`` and
      ``AuthorizationException`` into NO_PERMISSION, remark = the exception
      message ("check signature failed.", "User:ak is not found.", ...).
    * Proxy 5.x, remoting port: ``AbstractRemotingActivity.writeErrResponse``
      does not map those exceptions, so they arrive as SYSTEM_ERROR with the
      same bare message.
    * Broker 4.9.x, plain ACL: the RPC hook's ``AclException`` becomes
      SYSTEM_ERROR whose remark starts with the exception's class name.

    So NO_PERMISSION is always an AuthenticationError, and SYSTEM_ERROR is one
    when its remark matches those messages.
    """
    refused = code == codes.ResponseCode.NO_PERMISSION or (
        code == codes.ResponseCode.SYSTEM_ERROR and bool(remark and _AUTH_FAILURE_REMARK.search(remark))
    )
    if refused:
        denied = grants.denial(request_code, remark)
        if denied is not None:
            return AuthorizationError(denied, code, remark, request_code=request_code, address=address)
        return AuthenticationError(code, remark, request_code=request_code, address=address)
    cls = TopicNotFoundError if code == codes.ResponseCode.TOPIC_NOT_EXIST else BrokerResponseError
    return cls(code, remark, request_code=request_code, address=address)

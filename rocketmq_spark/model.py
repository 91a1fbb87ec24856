"""The plain values every layer shares: queues, client settings, subscription words. No I/O.

They sit below the remoting, records, config and source packages so that, for example, the
options can describe a client without importing the network code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MS_PER_SECOND = 1000
DEFAULT_REQUEST_TIMEOUT_S = 10.0
# Longest wait for a TCP connect and TLS handshake, as in RocketMQ's Java client: a server that
# is up accepts in milliseconds, and an address that drops packets fails in seconds, not at the
# (longer) request timeout.
MAX_CONNECT_TIMEOUT_S = 3.0
# A subscription that takes every message, and the two expression languages a pull can carry.
SUBSCRIBE_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, as RocketMQ stamps messages and offsets."""
    return int(time.time() * MS_PER_SECOND)


@dataclass(frozen=True, order=True)
class MessageQueue:
    """A RocketMQ message queue: the unit of ordering and offsets."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker_name}/{self.queue_id}"


@dataclass(frozen=True)
class Credentials:
    """ACL credentials; with them every request is signed. Left out of ``repr``, so that no
    log line, error or plan that prints a config shows them."""

    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SettingNames:
    """What the user calls a ``ClientConfig``'s TLS settings, for the certificate errors that say
    which one to change: by default the fields' own names; a config built from options names the
    options, so that the layers below never need to know them."""

    tls_trust: str = "tls_trust_pem"
    tls_verify: str = "tls_verify"


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the cluster. Hashable, so each process keeps one client per config.

    With ``tls``, server certificates are verified unless ``tls_verify`` is false: against
    ``tls_trust_pem`` (the PEM text of the CAs to trust) when set, else the system's CAs. The PEM
    text, not a path, travels with the config, so executors need no file of their own;
    ``tls_trust_path`` only says where it was read, and ``setting_names`` what the user calls these
    settings, for error messages.
    """

    name_servers: tuple[str, ...]
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    credentials: Credentials | None = None
    tls: bool = False
    tls_verify: bool = True
    tls_trust_pem: str | None = field(default=None, repr=False)
    tls_trust_path: str | None = None
    setting_names: SettingNames = field(default=SettingNames(), repr=False)

    @property
    def connect_timeout(self) -> float:
        return min(self.request_timeout, MAX_CONNECT_TIMEOUT_S)


# Java's String.trim() strips every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM_CHARS = "".join(map(chr, range(0x21)))
TAG_EXPRESSION_SEPARATOR = "||"


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """The tag set of a subscription, like ``FilterAPI.buildSubscriptionData``.

    None means every message (empty or ``*``). Otherwise the expression is split on ``||``, each
    tag trimmed and empty ones dropped; an expression of separators only gives an empty set,
    which matches nothing on the broker.
    """
    if not expression or expression == SUBSCRIBE_ALL:
        return None
    tags = (tag.strip(_JAVA_TRIM_CHARS) for tag in expression.split(TAG_EXPRESSION_SEPARATOR))
    return frozenset(tag for tag in tags if tag)


def parse_name_servers(value: str) -> tuple[str, ...]:
    """RocketMQ's namesrvAddr syntax: ``host:port;host:port`` (commas accepted as well)."""
    return tuple(part.strip() for part in value.replace(",", ";").split(";") if part.strip())

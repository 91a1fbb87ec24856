"""Every option of the ``rocketmq`` sink, parsed and checked in one place, before anything is sent.

The connection options are those the source takes (``config.cluster``); the sink adds where to
send (``topic``), as whom (``producerGroup``), and how (timeouts, retries, compression, batching),
with the defaults of RocketMQ's Java ``DefaultMQProducer`` where it has one. ``retries`` becomes
the task's ``Retry`` (``sink_retry``): the Java producer's count of attempts and answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketmq_spark.config.cluster import (
    CLUSTER_OPTIONS,
    NAMESPACE,
    client_config,
    name_servers,
    with_namespace,
)
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.config.values import OptionReader
from rocketmq_spark.model import ClientConfig
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.retry import NO_BUDGET, Retry

OWNER = "the rocketmq sink"
TOPIC = "topic"
PRODUCER_GROUP = "producerGroup"
SEND_TIMEOUT_MS = "sendTimeoutMs"
RETRIES = "retries"
COMPRESS_BODY_OVER_BYTES = "compressBodyOverBytes"
BATCH_MAX_BYTES = "batchMaxBytes"
DELIVERY_GUARANTEE = "deliveryGuarantee"
WRITE_ID = "writeId"
TRANSACTION_TOPIC = "transactionTopic"

# The options only a write takes: one of them in a query's options says it writes.
WRITE_ONLY_OPTIONS = (
    PRODUCER_GROUP,
    SEND_TIMEOUT_MS,
    RETRIES,
    COMPRESS_BODY_OVER_BYTES,
    BATCH_MAX_BYTES,
    DELIVERY_GUARANTEE,
    WRITE_ID,
    TRANSACTION_TOPIC,
)
ALL_OPTIONS = (*CLUSTER_OPTIONS, TOPIC, *WRITE_ONLY_OPTIONS)
# Options Spark itself sets or passes along (a save path, a stream's checkpoint): taken, not used.
SPARK_OWNED = frozenset({"path", "checkpointlocation"})

DEFAULT_PRODUCER_GROUP = "rocketmq-spark-writer"
DEFAULT_SEND_TIMEOUT_MS = 3000
DEFAULT_RETRIES = 2
DEFAULT_COMPRESS_BODY_OVER_BYTES = 4096
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
DEFAULT_TRANSACTION_TOPIC = "rocketmq-spark-transactions"
# The pause before an ordered or explicit-queue send is tried again on its own queue (a send that
# may go elsewhere goes to another broker at once); at least remoting.replicas'
# MIN_ROUTE_REFRESH_S, so the route the retry takes was asked after the failure.
PINNED_RETRY_PAUSE_S = 1.0
# Answers after which the Java producer sends again (DefaultMQProducer.retryResponseCodes), besides
# the errors that say a retry can fix them: the sink retries what the Java producer retries.
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
        ResponseCode.GO_AWAY,
        ResponseCode.FLOW_CONTROL,
    }
)


@dataclass(frozen=True)
class SinkOptions:
    """A write's checked options. ``topic`` and ``producer_group`` carry the namespace prefix when
    one is set, as RocketMQ's clients send them; ``batch_max_bytes`` 0 sends one message at a time."""

    client: ClientConfig
    topic: str | None
    namespace: str | None
    producer_group: str
    send_timeout_ms: int
    retries: int
    compress_body_over_bytes: int
    batch_max_bytes: int
    exactly_once: ExactlyOnceOptions | None = None  # None: at least once


@dataclass(frozen=True)
class ExactlyOnceOptions:
    """What ``deliveryGuarantee=exactly-once`` adds: where the transaction records go (namespaced
    as the topic is) and a ``df.write``'s name, if given."""

    transaction_topic: str
    write_id: str | None


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """The sink's options, or ConfigurationError naming the option, the problem and the fix."""
    reader = OptionReader(raw, ALL_OPTIONS, SPARK_OWNED, owner=OWNER)
    servers = name_servers(reader)
    namespace = reader.get(NAMESPACE)
    topic = reader.get(TOPIC)
    exactly_once = _exactly_once(reader, namespace)
    group = reader.get(PRODUCER_GROUP) or DEFAULT_PRODUCER_GROUP

    def number(name: str, default: int, *, zero_ok: bool) -> int:
        value = reader.positive_int(name, default, zero_ok=zero_ok)
        assert value is not None  # a default is given
        return value

    return SinkOptions(
        client=client_config(reader, servers),
        topic=None if topic is None else with_namespace(topic, namespace),
        namespace=namespace,
        producer_group=with_namespace(group, namespace),
        send_timeout_ms=number(SEND_TIMEOUT_MS, DEFAULT_SEND_TIMEOUT_MS, zero_ok=False),
        retries=number(RETRIES, DEFAULT_RETRIES, zero_ok=True),
        compress_body_over_bytes=number(COMPRESS_BODY_OVER_BYTES, DEFAULT_COMPRESS_BODY_OVER_BYTES, zero_ok=False),
        batch_max_bytes=number(BATCH_MAX_BYTES, DEFAULT_BATCH_MAX_BYTES, zero_ok=True),
        exactly_once=exactly_once,
    )


def _exactly_once(reader: OptionReader, namespace: str | None) -> ExactlyOnceOptions | None:
    """``deliveryGuarantee`` and what exactly-once needs with it: an explicit ``producerGroup`` (the
    transactions are the group's, across the query's restarts)."""
    guarantee = (reader.get(DELIVERY_GUARANTEE) or AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ConfigurationError(
            DELIVERY_GUARANTEE,
            f"'{reader.get(DELIVERY_GUARANTEE)}' is not a guarantee",
            f"Write {AT_LEAST_ONCE} or {EXACTLY_ONCE}",
        )
    write_id = reader.get(WRITE_ID)
    if guarantee == AT_LEAST_ONCE:
        for name in (WRITE_ID, TRANSACTION_TOPIC):
            if reader.get(name) is not None:
                raise ConfigurationError(
                    name,
                    f"is used only with {DELIVERY_GUARANTEE}={EXACTLY_ONCE}",
                    f"Set {DELIVERY_GUARANTEE} to {EXACTLY_ONCE}, or drop {name}",
                )
        return None
    if not reader.get(PRODUCER_GROUP):
        raise ConfigurationError(
            PRODUCER_GROUP,
            f"is required with {DELIVERY_GUARANTEE}={EXACTLY_ONCE}",
            "Name a group of this query (or write) alone, kept across its restarts, e.g. orders-enricher",
        )
    topic = reader.get(TRANSACTION_TOPIC) or DEFAULT_TRANSACTION_TOPIC
    return ExactlyOnceOptions(with_namespace(topic, namespace), write_id)


def sink_retry(options: SinkOptions) -> Retry:
    """How a task retries its sends: ``retries`` more attempts after the first, as the Java
    producer counts them (no time bound: each send has its own timeout), after its answers, with
    a steady pause before a send tried again on its own queue."""
    return Retry(
        budget_s=NO_BUDGET,
        first_backoff_s=PINNED_RETRY_PAUSE_S,
        max_backoff_s=PINNED_RETRY_PAUSE_S,
        attempts=options.retries + 1,
        answers=RETRY_RESPONSE_CODES,
    )


def looks_like_a_write(raw: Mapping[str, str]) -> bool:
    """Whether the options name one that only a write takes."""
    write_only = {name.lower() for name in WRITE_ONLY_OPTIONS}
    return any(key.lower() in write_only for key in raw)

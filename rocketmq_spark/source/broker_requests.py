"""What the stream's driver answers when a broker asks its registered client something.

Brokers send these on the connection the group's heartbeats use (``remoting/client_requests.py``
has the wire forms): an operator's reset on a 4.9 broker goes to the reset inbox for the next
trigger to plan with; ``mqadmin consumerStatus`` and the dashboard get the stream's subscription
and, per queue, its stored offset and the batch it reads, as a Java pull consumer would show them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from importlib import metadata

from rocketmq_spark.model import MessageQueue, now_ms
from rocketmq_spark.remoting import client_requests
from rocketmq_spark.remoting.client_requests import QueueStanding
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.membership import CONSUME_ACTIVELY, Subscription
from rocketmq_spark.source.option_model import SourceOptions
from rocketmq_spark.source.resets import ResetInbox

log = logging.getLogger(__name__)

# The Java client's names of its running-info properties, and what this source adds to them.
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
PROP_SOURCE = "rocketmqSparkVersion"
# The protocol version this client speaks (codes.PROTOCOL_VERSION), as MQVersion names it.
CLIENT_VERSION_NAME = "V4_9_4"
DISTRIBUTION = "rocketmq-spark"

Standing = Callable[[], Mapping[MessageQueue, QueueStanding]]


def _installed_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


class BrokerRequests:
    """The handler the stream's client serves brokers' requests with (``RocketMQClient.serve``)."""

    def __init__(
        self,
        options: SourceOptions,
        inbox: ResetInbox,
        standing: Standing,
        subscriptions: list[Subscription],
        sub_version: int,
    ) -> None:
        self._options = options
        self._inbox = inbox
        self._standing = standing
        self._subscriptions = subscriptions
        self._sub_version = sub_version
        self._properties = {
            PROP_NAMESERVER_ADDR: ";".join(options.client.name_servers),
            PROP_CONSUME_TYPE: CONSUME_ACTIVELY,
            PROP_CONSUME_ORDERLY: "false",
            PROP_CLIENT_VERSION: CLIENT_VERSION_NAME,
            PROP_CONSUMER_START_TIMESTAMP: str(now_ms()),
            PROP_SOURCE: _installed_version(),
        }

    def __call__(self, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset(request)
            return None
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return client_requests.response(
                body=client_requests.running_info_body(
                    self._properties, self._subscriptions, self._sub_version, self._standing()
                )
            )
        if request.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            topic = request.ext_fields.get("topic")
            offsets = {q: s.committed for q, s in self._standing().items() if q.topic == topic}
            return client_requests.response(body=client_requests.consumer_status_body(offsets))
        return None  # notices the stream has no use for (NOTIFY_CONSUMER_IDS_CHANGED)

    def _reset(self, request: RemotingCommand) -> None:
        try:
            notice = client_requests.read_offset_reset(request)
        except ProtocolError as err:
            log.warning("an offset reset notice from a broker could not be read: %s", err)
            return
        if notice.group == self._options.consumer_group and notice.topic in self._options.topics:
            self._inbox.put(notice.offsets)

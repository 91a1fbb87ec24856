"""What the writing tasks of one Python worker share: the producer's client id and unique ids, and
its registration with each broker, over this process's view of the cluster (``remoting.cluster``:
the client, its connections and the topics' routes, which the source's tasks use too).

A producer registers with a broker by heartbeat before its first send there, and again every
``membership.HEARTBEAT_INTERVAL_S`` while it sends (as the Java producer does), so ``mqadmin
producerConnection`` lists it. The heartbeat's answer also says which line the broker runs, which
decides how a message is written for it (a timer message needs 5.x; 5.x reserves more property
names).
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from rocketmq_spark.model import ClientConfig
from rocketmq_spark.records.outgoing import UniqueIds
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.client import Answer
from rocketmq_spark.remoting.cluster import shared_cluster
from rocketmq_spark.remoting.codes import FIRST_5X_VERSION
from rocketmq_spark.remoting.connection import local_ip
from rocketmq_spark.remoting.membership import HEARTBEAT_INTERVAL_S, WRITER_CLIENT_MARK, producer_heartbeat
from rocketmq_spark.remoting.replicas import Replicas

T = TypeVar("T")


class SendingClient(Protocol):
    """What the sink uses of ``RocketMQClient``: one call at a time (heartbeats), and sends
    without waiting for their answers."""

    def call(self, address: str, call: Call[T], timeout: float | None = None) -> T: ...

    def submit(self, address: str, call: Call[object], timeout: float | None = None) -> Answer: ...


def address_bytes(ip: str) -> bytes:
    """The packed address a unique id starts with (4 bytes for IPv4, 16 for IPv6)."""
    return ipaddress.ip_address(ip).packed


@dataclass
class WorkerProducer:
    """One producer group's registration and ids over one client, shared by a worker's tasks."""

    client: SendingClient
    group: str
    client_id: str
    ids: UniqueIds
    replicas: Replicas  # the cluster view's routes and failed addresses (remoting.cluster)
    clock: Callable[[], float] = time.monotonic
    _beats: dict[str, tuple[float, int]] = field(default_factory=dict)  # address -> (when, server version)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, address: str) -> bool:
        """Register the producer with the broker (or proxy) at ``address`` when its last heartbeat
        there is older than the interval (raises what that met), and say whether that broker runs
        RocketMQ 5.x, as the heartbeat's answer told."""
        now = self.clock()
        # Every row asks, so the read takes no lock: a dict read is atomic, and a beat is only
        # ever replaced whole (under the lock, below).
        beat = self._beats.get(address)
        if beat is None or now - beat[0] >= HEARTBEAT_INTERVAL_S:
            version = self.client.call(address, producer_heartbeat(self.client_id, self.group))
            beat = (now, version)
            with self._lock:
                self._beats[address] = beat
        return beat[1] >= FIRST_5X_VERSION


_producers: dict[tuple[ClientConfig, str], WorkerProducer] = {}
_producers_lock = threading.Lock()


def shared_producer(config: ClientConfig, group: str) -> WorkerProducer:
    """This worker's producer for the config and group, made on first use over the process's view
    of that cluster."""
    with _producers_lock:
        producer = _producers.get((config, group))
        if producer is None:
            cluster = shared_cluster(config)
            ip = local_ip(config.name_servers[0])
            producer = WorkerProducer(
                client=cluster.client,
                group=group,
                client_id=f"{ip}{WRITER_CLIENT_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}",
                ids=UniqueIds(address_bytes(ip)),
                replicas=cluster.replicas,
            )
            _producers[(config, group)] = producer
        return producer

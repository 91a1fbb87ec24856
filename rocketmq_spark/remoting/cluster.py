"""One process's view of one RocketMQ cluster, shared by whoever reads or writes it.

A Python worker runs the source's read tasks and the sink's write tasks one after another (and a
driver plans reads and commits writes): each of them asking a cluster of its own would hold two
connection pools, two route caches, two memories of which broker failed, and ask the name server
twice for what one answer tells. So a process keeps one ``Cluster`` per ``ClientConfig`` (name
servers, TLS, credentials, request timeout: what decides how the cluster is reached), made on
first use and kept while the process lives, as kafka-python keeps one ``ClusterMetadata`` per
client:

- ``client``: the connections (one control connection per address, replaced when it breaks; the
  per-thread pull connections of the read path) and the typed requests over them;
- ``replicas``: the topics' routes with one cache and one refresh rule, which replica serves a
  read and which master takes a send, and the addresses that failed lately and for how long (the
  process's one memory of them, ``outages.PROCESS_OUTAGES``, which its retry policies share too);
- ``members``: who answers what brokers ask over those connections: each stream the driver runs
  registers its consumer group membership there, by client id.

The sink's producer registration (its heartbeats) sits on top, in ``sink.shared``, as the source's
group membership does in ``source.group``: both beat every ``membership.HEARTBEAT_INTERVAL_S``
over this one client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketmq_spark.model import ClientConfig
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.client_requests import Members
from rocketmq_spark.remoting.outages import PROCESS_OUTAGES, Outages
from rocketmq_spark.remoting.replicas import Replicas


@dataclass(frozen=True)
class Cluster:
    """The client and the routes every reader and writer of one cluster in this process uses."""

    client: RocketMQClient
    replicas: Replicas
    members: Members = field(default_factory=Members)

    @classmethod
    def of(
        cls, client: RocketMQClient, clock: Callable[[], float] = time.monotonic, outages: Outages | None = None
    ) -> Cluster:
        """A view over ``client``; with no ``outages``, a memory of failed addresses of its own
        (tests, benchmarks, a caller that owns its client)."""
        return cls(client, Replicas(client.topic_route, clock, outages or Outages()))

    def answer_brokers(self) -> None:
        """Have the members answer what brokers ask on the client's connections (the driver's
        streams register there; executors have none)."""
        self.client.serve(self.members)


_clusters: dict[ClientConfig, Cluster] = {}
_clusters_lock = threading.Lock()


def shared_cluster(config: ClientConfig) -> Cluster:
    """This process's view of the cluster ``config`` reaches, made on first use: the source's and
    the sink's tasks of a worker share it, so its connections and routes outlive a single task."""
    with _clusters_lock:
        cluster = _clusters.get(config)
        if cluster is None:
            cluster = _clusters[config] = Cluster.of(RocketMQClient(config), outages=PROCESS_OUTAGES)
        return cluster

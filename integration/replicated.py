"""Replicated layouts of the launcher: each broker name served by several brokers, its replicas.

``ClusterConfig.layout`` picks one (``python -m integration.cluster start --layout ...``):

- ``master-slave``: a SYNC_MASTER (brokerId 0) and a SLAVE (brokerId 1). The slave copies the
  master's commit log over the master's HA port, and its topics and the groups' offsets every
  10 s on 4.9, once a minute on 5.x. Nothing promotes it: while the master is down the slave
  serves reads (4.9 always, 5.x only with ``slaveReadEnable``) and nothing takes writes.
- ``dledger``: three brokers of one DLedger (Raft) group. They elect a leader, which registers as
  brokerId 0, and elect another when it dies; a send is acknowledged once a majority has it.
- ``controller`` (5.x): two brokers under the controller that runs inside the name server
  (``enableControllerInNamesrv``), which promotes the in-sync slave when the master dies. With
  ``allAckInSyncStateSet`` the master acknowledges a send once every in-sync replica has it.

Which replicas serve a broker name, their ports and their config files: replicated_config.py.

Besides starting and stopping (launcher.py), a test can SIGKILL a replica (``kill``), start it
again on its store (``restart``), ask which replica the name server lists as master
(``master``), wait for a master (``wait_master``), and wait until every running replica holds
what the master holds (``wait_in_step``), which is when the master can be killed without a
replica missing a message the producer saw acknowledged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from integration.cluster_config import (
    BROKER_HEAP,
    BROKER_MAIN,
    BROKER_READY,
    FAST_CHANNEL_PORT_OFFSET,
    LAYOUT_CONTROLLER,
    NAMESRV_HEAP,
    NAMESRV_MAIN,
    NAMESRV_READY,
    PROXY_MODE_LOCAL,
    ClusterConfig,
    ClusterError,
    namesrv_name,
    write_properties,
)
from integration.constants import LOOPBACK, POLL_S
from integration.launcher import Cluster
from integration.processes import READY_TIMEOUT_S, Server, wait_ready
from integration.replicated_config import (
    CONTROLLER_READY,
    MASTER_ID,
    REPLICAS,
    Replica,
    controller_addr,
    controller_port,
    namesrv_settings,
    replica_ports,
    replica_settings,
    replicas,
)
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.route import quote_bare_int_keys

# Requests the package's client has no call for.
GET_ALL_TOPIC_CONFIG = 21
CONTROLLER_GET_SYNC_STATE_DATA = 1006
# What a topic created by request names besides its queues and permissions, as mqadmin sends it.
DEFAULT_TOPIC = "TBW102"
SINGLE_TAG = "SINGLE_TAG"
# The first release whose slaves take a topic created on them (4.9's refuse it).
FIRST_TOPIC_SPREADING_MAJOR = 5


def _json(body: bytes) -> Any:
    """A broker's or name server's JSON answer; fastjson writes map keys that are numbers bare."""
    text = body.decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(quote_bare_int_keys(text))


class ReplicatedCluster(Cluster):
    """A cluster whose broker names are each served by replicas (see the module)."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self._replicas = {r.name: r for r in replicas(config)} if config.layout in REPLICAS else {}

    def start(self, keep_data: bool = False) -> ReplicatedCluster:
        cfg = self.config
        if cfg.layout not in REPLICAS:
            raise ClusterError(f"{cfg.layout} is not a replicated layout; choose one of {', '.join(REPLICAS)}")
        if cfg.layout == LAYOUT_CONTROLLER and not cfg.release.has_controller_mode:
            raise ClusterError(f"controller mode came with RocketMQ 5; {cfg.version} has none")
        if cfg.brokers < 1 or (cfg.proxy and cfg.proxy_mode == PROXY_MODE_LOCAL):
            raise ClusterError("a replicated layout needs a broker name or more, and no proxy embedding a broker")
        ports = self.all_ports()
        if len(set(ports)) != len(ports):
            raise ClusterError(f"the layout's ports overlap: {sorted(ports)}; choose broker ports further apart")
        super().start(keep_data)
        return self

    def replicas(self, broker_name: str | None = None) -> list[Replica]:
        """The replicas of one broker name, or of all."""
        return [r for r in self._replicas.values() if broker_name is None or r.broker_name == broker_name]

    def all_ports(self) -> list[int]:
        cfg = self.config
        ports = list(cfg.namesrv_ports)
        if cfg.layout == LAYOUT_CONTROLLER:
            ports.append(controller_port(cfg))
        for replica in self._replicas.values():
            ports += replica_ports(cfg, replica)
        if cfg.proxy:
            ports += [cfg.proxy_remoting_port, cfg.proxy_grpc_port]
        return ports

    def _spawn_namesrv(self, index: int) -> Server:
        cfg = self.config
        name = namesrv_name(index)
        conf = cfg.workdir / "conf" / f"{name}.conf"
        settings = namesrv_settings(cfg, index)
        write_properties(conf, settings)
        ports, ready = [cfg.namesrv_ports[index]], [NAMESRV_READY]
        if "enableControllerInNamesrv" in settings:
            ports.append(controller_port(cfg))
            ready.append(CONTROLLER_READY)
        return self._spawn("namesrv", name, NAMESRV_MAIN, NAMESRV_HEAP, ["-c", str(conf)], ports, ready)

    def _spawn_brokers(self) -> list[Server]:
        return [self._spawn_replica(r) for r in self._replicas.values()]

    def _spawn_replica(self, replica: Replica) -> Server:
        cfg = self.config
        conf = cfg.workdir / "conf" / f"{replica.name}.conf"
        write_properties(conf, replica_settings(cfg, replica))
        ports = [replica.port, replica.port + FAST_CHANNEL_PORT_OFFSET]
        args = ["-c", str(conf), "-n", cfg.namesrv_addr]
        return self._spawn("broker", replica.name, BROKER_MAIN, BROKER_HEAP, args, ports, [BROKER_READY])

    def _wait_brokers(self, deadline: float) -> None:
        """Until every name server lists every replica and a master of each broker name (a
        DLedger group elects one a few seconds after its brokers start)."""
        for broker_name in dict.fromkeys(r.broker_name for r in self._replicas.values()):
            self._wait(partial(self._serving, broker_name), f"{broker_name}: every replica and a master", deadline)

    def _serving(self, broker_name: str) -> bool:
        names = [r.name for r in self.replicas(broker_name)]
        return self._lists(broker_name, names) and self._master_of(broker_name) is not None

    def restart(self, name: str) -> None:
        """Start a killed replica again on its store and ports (it rejoins as its layout decides:
        the master-slave master as master, a DLedger or controller-mode replica as a follower
        until an election), until the name servers list it; a name server as ``Cluster`` does."""
        replica = self._replicas.get(name)
        if replica is None:
            super().restart(name)
            return
        if self.running(name):
            raise ClusterError(f"{name} is running; stop or kill it first")
        deadline = time.monotonic() + READY_TIMEOUT_S
        wait_ready(self._spawn_replica(replica), deadline)
        self._wait(lambda: self._lists(replica.broker_name, [name]), f"{name} registered again", deadline)

    # ----------------------------------------------------------------- what the name server says

    def listed(self, broker_name: str, namesrv: str | None = None) -> dict[int, str]:
        """The replicas of the broker name a name server lists now: brokerId -> address."""
        with self._client() as client:
            addr = namesrv or self.config.namesrv_addr.split(";")[0]
            response = client.invoke(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS or not response.body:
            return {}  # no broker registered yet
        table = _json(response.body).get("brokerAddrTable", {})
        addrs = table.get(broker_name, {}).get("brokerAddrs", {})
        return {int(k): str(v) for k, v in addrs.items()}

    def master(self, broker_name: str) -> str | None:
        """The replica the name server lists as the broker name's master now (None: no master)."""
        return self._master_of(broker_name)

    def wait_master(
        self,
        broker_name: str,
        *,
        replica: str | None = None,
        other_than: str | None = None,
        timeout_s: float = READY_TIMEOUT_S,
    ) -> str:
        """Until the name server lists a master of the broker name (``replica``, or any but
        ``other_than``); that replica's name."""

        def found() -> str | None:
            master = self._master_of(broker_name)
            return master if master not in (None, other_than) and replica in (None, master) else None

        what = (
            f"a master of {broker_name}"
            + (f": {replica}" if replica else "")
            + (f" other than {other_than}" if other_than else "")
        )
        result: str = self._wait(found, what, time.monotonic() + timeout_s)
        return result

    def spread_topic(self, topic: str) -> None:
        """Create the topic on every running replica that is not its master, as the route gives
        it. Topics are created on masters, and a 5.x slave copies them only once a minute; until
        then it refuses to serve the topic, which would leave the test waiting for it. A 4.9
        slave refuses topic changes, and copies them every 10 s."""
        if self.config.release.major < FIRST_TOPIC_SPREADING_MAJOR:
            return
        with self._client() as client:
            route = client.topic_route(topic)
            for data in route.queue_datas:
                master = route.master_address(data.broker_name)
                fields = {
                    "topic": topic,
                    "defaultTopic": DEFAULT_TOPIC,
                    "readQueueNums": data.read_queue_nums,
                    "writeQueueNums": data.write_queue_nums,
                    "perm": data.perm,
                    "topicFilterType": SINGLE_TAG,
                    "topicSysFlag": 0,
                    "order": False,
                }
                for replica in self.replicas(data.broker_name):
                    if self.running(replica.name) and replica.address != master:
                        response = client.invoke(replica.address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
                        if response.code != ResponseCode.SUCCESS:
                            raise ClusterError(f"{replica.name} did not create {topic}: {response.remark}")

    def wait_in_step(self, topic: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every running replica of the topic's broker names has the topic and the master's
        max offset on each of its queues, and (controller mode) is in the master's sync state
        set: a replica that takes over then holds every message the master acknowledged."""
        self._wait(
            lambda: not self._out_of_step(topic),
            f"the replicas of {topic} in step with their masters",
            time.monotonic() + timeout_s,
            lambda: self._out_of_step(topic),
        )

    def _out_of_step(self, topic: str) -> list[str]:
        """What keeps the topic's replicas from being in step (nothing: they are)."""
        with self._client() as client:
            route = client.topic_route(topic)
            behind = []
            for data in route.queue_datas:
                master = route.master_address(data.broker_name)
                if master is None:
                    return [f"{data.broker_name} has no master"]
                queues = [MessageQueue(topic, data.broker_name, q) for q in range(data.read_queue_nums)]
                ends = [client.call(master, calls.max_offset(q)) for q in queues]
                for replica in self.replicas(data.broker_name):
                    if self.running(replica.name) and replica.address != master:
                        behind += self._replica_behind(client, replica, topic, queues, ends)
                if self.config.layout == LAYOUT_CONTROLLER:
                    behind += self._not_in_sync(client, data.broker_name)
        return behind

    def knows_topic(self, replica_name: str, topic: str) -> bool:
        """Whether the replica holds the topic's config: a slave copies its master's topics only
        now and then (see ``spread_topic``), and not at all while the master is down."""
        with self._client() as client:
            return topic in self._topics(client, self._replicas[replica_name])

    @staticmethod
    def _topics(client: RocketMQClient, replica: Replica) -> dict[str, Any]:
        return dict(_json(client.invoke(replica.address, GET_ALL_TOPIC_CONFIG).body).get("topicConfigTable", {}))

    def _replica_behind(
        self, client: RocketMQClient, replica: Replica, topic: str, queues: Sequence[MessageQueue], ends: Sequence[int]
    ) -> list[str]:
        try:
            if topic not in self._topics(client, replica):
                return [f"{replica.name} does not know {topic} yet"]
            offsets = [client.call(replica.address, calls.max_offset(q)) for q in queues]
        except RocketMQError as err:
            return [f"{replica.name}: {err}"]
        return [f"{replica.name} holds {offsets}, the master {list(ends)}"] if offsets != list(ends) else []

    def _not_in_sync(self, client: RocketMQClient, broker_name: str) -> list[str]:
        """Running replicas the controller does not count in the broker name's sync state set."""
        response = client.invoke(
            controller_addr(self.config), CONTROLLER_GET_SYNC_STATE_DATA, body=json.dumps([broker_name]).encode()
        )
        if response.code != ResponseCode.SUCCESS:
            return [f"the controller answered {response.code}: {response.remark}"]
        info = _json(response.body).get("replicasInfoTable", {}).get(broker_name, {})
        in_sync = {r.get("brokerAddress") for r in info.get("inSyncReplicas") or []}
        return [
            f"{r.name} is not in sync"
            for r in self.replicas(broker_name)
            if self.running(r.name) and r.address not in in_sync
        ]

    def _master_of(self, broker_name: str) -> str | None:
        address = self.listed(broker_name).get(MASTER_ID)
        return next((r.name for r in self.replicas(broker_name) if r.address == address), None)

    def _lists(self, broker_name: str, names: Sequence[str]) -> bool:
        """Whether every name server lists each of the named replicas of the broker name."""
        wanted = {self._replicas[n].address for n in names}
        return all(
            wanted <= set(self.listed(broker_name, f"{LOOPBACK}:{port}").values()) for port in self.config.namesrv_ports
        )

    def _client(self) -> RocketMQClient:
        return RocketMQClient(ClientConfig(tuple(self.config.namesrv_addr.split(";"))))

    @staticmethod
    def _wait(check: Callable[[], Any], what: str, deadline: float, why: Callable[[], Any] | None = None) -> Any:
        """The first truthy answer of ``check`` (errors of a server starting count as no), polled
        until ``deadline``; past it a ClusterError naming ``what`` (and ``why()``)."""
        while True:
            try:
                answer = check()
            except RocketMQError:
                answer = None
            if answer:
                return answer
            if time.monotonic() > deadline:
                try:
                    reason = f" ({why()})" if why else ""
                except RocketMQError as err:
                    reason = f" ({err})"
                raise ClusterError(f"not in time: {what}{reason}")
            time.sleep(POLL_S)

"""Replicated layouts (integration/replicated.py): which replicas serve each broker name, their
ports, and the config files the launcher writes for them and for the controller.

Replica ``r`` of broker name ``i`` is the server ``<broker name>-<r>`` with a store of its own.
Its ports come from ``broker_ports[i]``, so they move with ``ROCKETMQ_PORT_OFFSET`` as every
harness port does: it listens ``r * REPLICA_PORT_STEP`` above it, with its fast channel two below
and its HA port one above that, and a DLedger replica its peer port ``DLEDGER_PORT_OFFSET``
above. The controller listens ``CONTROLLER_PORT_OFFSET`` above the first name server. On the
default ports that gives broker-a 10911, 10941, 10971 and broker-b 10921, 10951, 10981, and the
controller 9878: clear of each other and of the default cluster's ports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from integration.cluster_config import (
    BROKER_NAMES,
    FAST_CHANNEL_PORT_OFFSET,
    HA_PORT_OFFSET,
    LAYOUT_CONTROLLER,
    LAYOUT_DLEDGER,
    LAYOUT_MASTER_SLAVE,
    ClusterConfig,
    broker_settings,
    broker_store,
)
from integration.constants import LOOPBACK

REPLICAS = {LAYOUT_MASTER_SLAVE: 2, LAYOUT_DLEDGER: 3, LAYOUT_CONTROLLER: 2}
REPLICA_PORT_STEP = 30
DLEDGER_PORT_OFFSET = 5
CONTROLLER_PORT_OFFSET = 2
MASTER_ID = 0
SYNC_MASTER, SLAVE = "SYNC_MASTER", "SLAVE"
# Controller mode: the controller assigns brokerIds; a broker starts as a slave without one.
UNASSIGNED_ID = -1
DLEDGER_PEER_PREFIX = "n"
CONTROLLER_GROUP = "controller"
CONTROLLER_PEER = "c0"
CONTROLLER_READY = "ControllerManager boot success"
# With ``unclean_election``: how long a master waits for a slave's acknowledgements before it
# leaves it out of the sync state set and acknowledges sends alone.
UNCLEAN_CATCHUP_MS = 3_000


@dataclass(frozen=True)
class Replica:
    """One broker of a replicated broker name."""

    name: str  # the server's name: <broker name>-<index>
    broker_name: str
    broker_index: int
    index: int  # in master-slave, 0 starts as the master
    port: int

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"


def replicas(config: ClusterConfig) -> list[Replica]:
    """Every replica of every broker name the config serves, broker name by broker name."""
    count = REPLICAS[config.layout]
    return [
        Replica(f"{BROKER_NAMES[i]}-{r}", BROKER_NAMES[i], i, r, config.broker_ports[i] + r * REPLICA_PORT_STEP)
        for i in range(config.brokers)
        for r in range(count)
    ]


def controller_port(config: ClusterConfig) -> int:
    return config.namesrv_port + CONTROLLER_PORT_OFFSET


def controller_addr(config: ClusterConfig) -> str:
    return f"{LOOPBACK}:{controller_port(config)}"


def replica_ports(config: ClusterConfig, replica: Replica) -> list[int]:
    """Every port the replica binds: listen, fast channel, HA and, in a DLedger group, its peer port."""
    ports = [replica.port, replica.port + FAST_CHANNEL_PORT_OFFSET, replica.port + HA_PORT_OFFSET]
    if config.layout == LAYOUT_DLEDGER:
        ports.append(replica.port + DLEDGER_PORT_OFFSET)
    return ports


def namesrv_settings(config: ClusterConfig, index: int) -> dict[str, str]:
    """A name server's config; in controller mode the first one also runs the controller."""
    settings = {"listenPort": str(config.namesrv_ports[index])}
    if config.layout == LAYOUT_CONTROLLER and index == 0:
        settings.update(
            enableControllerInNamesrv="true",
            controllerDLegerGroup=CONTROLLER_GROUP,
            controllerDLegerPeers=f"{CONTROLLER_PEER}-{controller_addr(config)}",
            controllerDLegerSelfId=CONTROLLER_PEER,
            controllerStorePath=str(config.workdir / "store" / "controller"),
        )
        if config.unclean_election:
            settings["enableElectUncleanMaster"] = "true"
    return settings


def replica_settings(config: ClusterConfig, replica: Replica) -> dict[str, str]:
    """broker.conf of one replica: its broker name's settings, its own port and store, and its layout's."""
    store = broker_store(config.workdir, replica.name)
    settings = broker_settings(config, replica.broker_index)
    settings.update(
        listenPort=str(replica.port),
        haListenPort=str(replica.port + HA_PORT_OFFSET),
        storePathRootDir=str(store),
        storePathCommitLog=str(store / "commitlog"),
        slaveReadEnable=str(config.slave_read).lower(),
    )
    settings.update(_LAYOUT_SETTINGS[config.layout](config, replica))
    if config.layout == LAYOUT_DLEDGER:  # the group decides who is master
        for key in ("brokerId", "brokerRole"):
            settings.pop(key)
    settings.update(config.extra_broker_settings)
    settings.update(config.broker_overrides.get(replica.name, {}))
    return settings


def _master_slave(_: ClusterConfig, replica: Replica) -> dict[str, str]:
    return {"brokerId": str(replica.index), "brokerRole": SYNC_MASTER if replica.index == MASTER_ID else SLAVE}


def _dledger(config: ClusterConfig, replica: Replica) -> dict[str, str]:
    group = [r for r in replicas(config) if r.broker_name == replica.broker_name]
    peers = ";".join(f"{DLEDGER_PEER_PREFIX}{r.index}-{LOOPBACK}:{r.port + DLEDGER_PORT_OFFSET}" for r in group)
    return {
        "enableDLegerCommitLog": "true",
        "dLegerGroup": replica.broker_name,
        "dLegerPeers": peers,
        "dLegerSelfId": f"{DLEDGER_PEER_PREFIX}{replica.index}",
    }


def _controller(config: ClusterConfig, _: Replica) -> dict[str, str]:
    settings = {
        "brokerId": str(UNASSIGNED_ID),
        "brokerRole": SLAVE,
        "enableControllerMode": "true",
        "controllerAddr": controller_addr(config),
        "allAckInSyncStateSet": "true",
    }
    if config.unclean_election:
        settings["haMaxTimeSlaveNotCatchup"] = str(UNCLEAN_CATCHUP_MS)
    return settings


_LAYOUT_SETTINGS: dict[str, Callable[[ClusterConfig, Replica], dict[str, str]]] = {
    LAYOUT_MASTER_SLAVE: _master_slave,
    LAYOUT_DLEDGER: _dledger,
    LAYOUT_CONTROLLER: _controller,
}

"""What the launcher starts (ClusterConfig) and the config files it writes for each server.

Ports: ``ROCKETMQ_PORT_OFFSET`` moves every port the harness picks (these defaults and the tests'
own clusters) by the same amount, so two checkouts can run their tests on one machine at once.
A non-zero offset also gives the default cluster a work directory of its own (``work-<offset>``),
so two runs in one checkout never record, stop or share each other's cluster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from integration.build import jars
from integration.constants import LOOPBACK
from integration.tls_setup import TLS_DISABLED
from integration.tls_setup import proxy_settings as tls_proxy_settings
from integration.versions import DEFAULT_VERSION, AclStyle, LogbackStyle, Release, release, selected_version

CLUSTER_NAME = "DefaultCluster"
BROKER_NAMES = ("broker-a", "broker-b")
BROKER_A, BROKER_B = BROKER_NAMES
PROXY_MODE_CLUSTER = "cluster"
PROXY_MODE_LOCAL = "local"
# How each broker name is served: by one master (the default), or by replicas of one of the
# replicated layouts (integration/replicated.py).
LAYOUT_MASTERS = "masters"
LAYOUT_MASTER_SLAVE = "master-slave"
LAYOUT_DLEDGER = "dledger"
LAYOUT_CONTROLLER = "controller"
LAYOUTS = (LAYOUT_MASTERS, LAYOUT_MASTER_SLAVE, LAYOUT_DLEDGER, LAYOUT_CONTROLLER)

# Each server's JVM: its main class, the console line that says it is ready, and a heap small
# enough for a name server, two brokers and a proxy beside Spark on a 2-core test machine.
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
NAMESRV_READY = "The Name Server boot success"
BROKER_READY = "boot success"
PROXY_READY = "rocketmq-proxy startup successfully"
NAMESRV_HEAP = ("-Xms128m", "-Xmx256m")
BROKER_HEAP = ("-Xms512m", "-Xmx512m", "-XX:MaxDirectMemorySize=1g")
PROXY_HEAP = ("-Xms256m", "-Xmx512m")

PORT_OFFSET = int(os.environ.get("ROCKETMQ_PORT_OFFSET", "0"))
DEFAULT_WORKDIR = Path(__file__).resolve().parent / ("work" if PORT_OFFSET == 0 else f"work-{PORT_OFFSET}")


def shifted(port: int) -> int:
    """A harness port moved by ROCKETMQ_PORT_OFFSET."""
    return port + PORT_OFFSET


# Broker ports: RocketMQ also binds listenPort-2 (fast channel) and listenPort+1 (HA), so the
# second broker sits ten ports above the first.
DEFAULT_NAMESRV_PORT = shifted(9876)
DEFAULT_BROKER_PORTS = (shifted(10911), shifted(10921))
DEFAULT_PROXY_REMOTING_PORT = shifted(8080)
DEFAULT_PROXY_GRPC_PORT = shifted(8081)
FAST_CHANNEL_PORT_OFFSET = -2
HA_PORT_OFFSET = 1
# The first major release with the timer wheel (timerWheelEnable).
TIMER_WHEEL_MAJOR = 5
# The timer wheel where a cluster keeps it: by default it flushes its log and wheel every second
# and polls with three enqueue and three dequeue threads, which keeps an idle 5.3.3 broker at
# about 12% of a core; flushed every 10 s with one thread each way, about 8% (timer-less: 7%).
# Flushing keeps the wheel for a restart; delivery does not wait for it (test_sink_versions.py).
TIMER_SETTINGS = {"timerFlushIntervalMs": "10000", "timerGetMessageThreadNum": "1", "timerPutMessageThreadNum": "1"}

# Transaction check-backs within seconds instead of a minute (defaults: a half is checked once
# older than 6 s, every 60 s, at most 15 times): a broker checks a half older than
# TRANSACTION_TIMEOUT_MS every TRANSACTION_CHECK_INTERVAL_MS, making a copy of it each time, and
# after TRANSACTION_CHECK_MAX checks sets it aside (TRANS_CHECK_MAX_TIME_TOPIC). Exactly-once's
# tests count what a consumer sees only after that window, so a copy committed by mistake shows.
TRANSACTION_TIMEOUT_MS = 1_000
TRANSACTION_CHECK_INTERVAL_MS = 1_000
TRANSACTION_CHECK_MAX = 3
SHORT_TRANSACTION_CHECKS = {
    "transactionTimeOut": str(TRANSACTION_TIMEOUT_MS),
    "transactionCheckInterval": str(TRANSACTION_CHECK_INTERVAL_MS),
    "transactionCheckMax": str(TRANSACTION_CHECK_MAX),
}
# 5.5.0's and 5.5.1's TransactionalOpBatchService spins at a full core a few seconds after a
# broker resolved its first transactional message (apache/rocketmq#10966): it counts drained op
# queues' last write into its wake-up time. The mitigation docs/running-rocketmq.md gives
# operators: each END's op message written at once, as 4.9 does (any op is over the size), and
# the service asleep until the longest interval the setting holds (an int of ms, about 24.8
# days) after the last one. Measured: the thread's 10.3 CPU-s in 10 s down to under 0.06.
OP_BATCH_SPIN_MITIGATION = {"transactionOpMsgMaxSize": "1", "transactionOpBatchInterval": str(2**31 - 1)}
# From a half's send until the brokers have checked it every time and set it aside, with a few
# intervals to spare for a loaded machine.
TRANSACTION_CHECKS_SPARE = 3
PAST_THE_CHECKS_S = (
    TRANSACTION_TIMEOUT_MS + (TRANSACTION_CHECK_MAX + TRANSACTION_CHECKS_SPARE) * TRANSACTION_CHECK_INTERVAL_MS
) / 1_000
# From a half's send until a first check-back has come and its answer would have been put.
FIRST_CHECK_DONE_S = (TRANSACTION_TIMEOUT_MS + 2 * TRANSACTION_CHECK_INTERVAL_MS) / 1_000

# Where a broker keeps its consume queues: in files (every release) or, from 5.x on, in RocksDB
# (MessageStoreConfig's storeType, whose values are StoreType's names). ROCKETMQ_STORE picks it for
# every cluster a run starts, so the same tests run against either store.
STORE_ENV = "ROCKETMQ_STORE"
STORE_FILE = "file"
STORE_ROCKSDB = "rocksdb"
CONSUME_QUEUE_STORES = (STORE_FILE, STORE_ROCKSDB)
STORE_TYPE_KEY = "storeType"
STORE_TYPES = {STORE_FILE: "default", STORE_ROCKSDB: "defaultRocksDB"}
# The first major release with a RocksDB consume queue store (4.9 has none).
ROCKSDB_STORE_MAJOR = 5

# A known user for authentication tests: an ACL 2.0 user on 5.x, a plain_acl.yml admin account
# on 4.9.
ACL_USER = "rocketmq"
ACL_PASSWORD = "12345678"

COMMIT_LOG_FILE_BYTES = 64 * 1024 * 1024
SHORT_RETENTION_COMMIT_LOG_FILE_BYTES = 1024 * 1024
CONSUME_QUEUE_ENTRY_BYTES = 20
CONSUME_QUEUE_FILE_ENTRIES = 30_000


class ClusterError(RuntimeError):
    """The cluster could not be built, started, stopped or used."""


def selected_store() -> str:
    """The consume queue store ROCKETMQ_STORE names, or files; checked, so a typo fails at once."""
    store = os.environ.get(STORE_ENV, "").strip() or STORE_FILE
    if store not in CONSUME_QUEUE_STORES:
        raise ClusterError(
            f"{STORE_ENV}={store} is not a consume queue store; choose one of {', '.join(CONSUME_QUEUE_STORES)}"
        )
    return store


@dataclass
class ClusterConfig:
    """What to start. Every switch a later test may need is a field here."""

    workdir: Path = DEFAULT_WORKDIR
    # The RocketMQ release (see integration/versions.py); ROCKETMQ_VERSION sets the default.
    version: str = field(default_factory=selected_version)
    brokers: int = 2  # 0: a name server alone
    proxy: bool = False
    # "cluster": the proxy is its own JVM forwarding to the brokers (pull and offsets work);
    # "local": it embeds broker-a, but then answers PULL_MESSAGE with "request is not
    # implemented in LocalMessageService", so the connector's tests use cluster mode.
    proxy_mode: str = PROXY_MODE_CLUSTER
    namesrv_port: int = DEFAULT_NAMESRV_PORT
    # More name servers, each a JVM of its own; every broker registers with all of them.
    extra_namesrv_ports: tuple[int, ...] = ()
    broker_ports: tuple[int, ...] = DEFAULT_BROKER_PORTS
    proxy_remoting_port: int = DEFAULT_PROXY_REMOTING_PORT
    proxy_grpc_port: int = DEFAULT_PROXY_GRPC_PORT
    property_filter: bool = False
    acl: bool = False
    short_retention: bool = False
    max_transfer_count_in_memory: int | None = None
    extra_broker_settings: dict[str, str] = field(default_factory=dict)
    # TLS of every server (integration/tls_setup.py): None leaves RocketMQ's default (permissive,
    # with a self-signed certificate made by each server); "enforcing" or "permissive" serve a
    # certificate of a CA made for the run; "disabled" serves plain connections only.
    tls: str | None = None
    # Settings of one broker only, by name, on top of everything else (e.g. the address it
    # registers, to put a relay in front of it).
    broker_overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    # LAYOUT_MASTERS: each of ``brokers`` broker names is one master. A replicated layout serves
    # each by several brokers, its replicas (integration/replicated.py): a SYNC_MASTER and its
    # slave, a DLedger group of three, or (5.x) two brokers under the controller that runs in
    # the name server.
    layout: str = LAYOUT_MASTERS
    # slaveReadEnable on every replica: whether a 5.x slave serves pulls (4.9 slaves always do).
    slave_read: bool = False
    # Whether a 5.x broker runs its timer wheel, which timer messages (the sink's deliverTime)
    # need. Its threads poll while idle: a 5.3.3 broker's CPU at rest fell from 4.4 to 2.6 s a
    # minute without them, so the clusters of tests that send no timer message turn it off.
    timer_messages: bool = True
    # Controller layout only: the controller may elect a replica outside the sync state set
    # (enableElectUncleanMaster), and a master leaves a slave out of that set after
    # replicated_config.UNCLEAN_CATCHUP_MS without its acknowledgements (haMaxTimeSlaveNotCatchup, 15 s by
    # default): how an operator who prefers availability loses acknowledged messages.
    unclean_election: bool = False
    # Where the brokers keep their consume queues (STORE_FILE or, on 5.x, STORE_ROCKSDB); what
    # ROCKETMQ_STORE names by default. RocksDB answers offsets and time searches from its own index.
    consume_queue_store: str = field(default_factory=selected_store)
    # SHORT_TRANSACTION_CHECKS: the brokers check back halves within seconds.
    short_transaction_checks: bool = False

    @property
    def release(self) -> Release:
        return release(self.version)

    @property
    def namesrv_ports(self) -> tuple[int, ...]:
        return (self.namesrv_port, *self.extra_namesrv_ports)

    @property
    def namesrv_addr(self) -> str:
        """Every name server, as RocketMQ's clients and brokers take a list: ``a:p1;b:p2``."""
        return ";".join(f"{LOOPBACK}:{port}" for port in self.namesrv_ports)

    @property
    def proxy_addr(self) -> str:
        return f"{LOOPBACK}:{self.proxy_remoting_port}"

    def broker_addr(self, index: int) -> str:
        return f"{LOOPBACK}:{self.broker_ports[index]}"

    @property
    def tls_clients(self) -> bool:
        """Whether the Java clients (mqadmin, the test tool) connect with TLS."""
        return self.tls is not None and self.tls != TLS_DISABLED


def broker_store(workdir: Path, name: str) -> Path:
    """Where a broker keeps its store: commit log, consume queues and its ``config/`` files."""
    return workdir / "store" / name


def broker_settings(config: ClusterConfig, index: int) -> dict[str, str]:
    """broker.conf for one broker; the defaults are sized for a test machine, not production.

    A broker ignores settings its release does not know, so one set serves every release.
    """
    name = BROKER_NAMES[index]
    store = broker_store(config.workdir, name)
    settings = {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": name,
        "brokerId": "0",
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "namesrvAddr": config.namesrv_addr,
        "brokerIP1": LOOPBACK,
        "listenPort": str(config.broker_ports[index]),
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        "mappedFileSizeCommitLog": str(COMMIT_LOG_FILE_BYTES),
        "mappedFileSizeConsumeQueue": str(CONSUME_QUEUE_ENTRY_BYTES * CONSUME_QUEUE_FILE_ENTRIES),
        "maxIndexNum": "100000",
        "maxHashSlotNum": "50000",
        "diskMaxUsedSpaceRatio": "95",
        "diskSpaceWarningLevelRatio": "98",
        "diskSpaceCleanForciblyRatio": "97",
        "enablePropertyFilter": str(config.property_filter).lower(),
    }
    if config.max_transfer_count_in_memory is not None:
        settings["maxTransferCountOnMessageInMemory"] = str(config.max_transfer_count_in_memory)
    if config.short_retention:
        # Small commit-log files that expire as soon as they are full, checked every second, at
        # any hour: lets a test watch data disappear under a running query.
        settings.update(
            mappedFileSizeCommitLog=str(SHORT_RETENTION_COMMIT_LOG_FILE_BYTES),
            fileReservedTime="0",
            deleteWhen=";".join(f"{hour:02d}" for hour in range(24)),
            cleanResourceInterval="1000",
            destroyMapedFileIntervalForcibly="1000",
        )
    if config.acl:
        settings.update(_acl_settings(config, store))
    if config.release.major >= TIMER_WHEEL_MAJOR:
        settings.update(TIMER_SETTINGS if config.timer_messages else {"timerWheelEnable": "false"})
    if config.consume_queue_store != STORE_FILE:
        settings[STORE_TYPE_KEY] = STORE_TYPES[config.consume_queue_store]
    if config.short_transaction_checks:
        settings.update(SHORT_TRANSACTION_CHECKS)
    if config.release.spins_after_transactions:
        settings.update(OP_BATCH_SPIN_MITIGATION)
    settings.update(config.extra_broker_settings)
    settings.update(config.broker_overrides.get(name, {}))
    return settings


def _acl_settings(config: ClusterConfig, store: Path) -> dict[str, str]:
    if config.release.acl is AclStyle.PLAIN:
        # The accounts live in $ROCKETMQ_HOME/conf/plain_acl.yml (write_plain_acl).
        return {"aclEnable": "true"}
    settings = {
        "authenticationEnabled": "true",
        "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authenticationMetadataProvider": "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
        "initAuthenticationUser": json.dumps({"username": ACL_USER, "password": ACL_PASSWORD}),
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": ACL_USER, "secretKey": ACL_PASSWORD}),
        "authConfigPath": str(store / "auth"),
    }
    if config.release.authorizes:
        # Authorization too, as operators run it: ACL_USER is a super user (initAuthenticationUser
        # makes one), every other user gets only what createAcl grants it.
        settings.update(
            authorizationEnabled="true",
            authorizationProvider="org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
            authorizationMetadataProvider="org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
        )
    return settings


def write_plain_acl(workdir: Path) -> Path:
    """4.9's plain ACL: one admin account (ACL_USER), allowed every topic and group."""
    path = workdir / "conf" / "plain_acl.yml"
    path.write_text(
        "globalWhiteRemoteAddresses: []\n"
        "accounts:\n"
        f"  - accessKey: {ACL_USER}\n"
        f"    secretKey: {ACL_PASSWORD}\n"
        "    whiteRemoteAddress:\n"
        "    admin: true\n"
        "    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: PUB|SUB\n"
    )
    return path


def write_tools_credentials(workdir: Path) -> Path:
    """$ROCKETMQ_HOME/conf/tools.yml: the keys mqadmin signs with (both 4.9 and 5.x read it)."""
    path = workdir / "conf" / "tools.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"accessKey: {ACL_USER}\nsecretKey: {ACL_PASSWORD}\n")
    return path


def proxy_settings(config: ClusterConfig) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "rocketMQClusterName": CLUSTER_NAME,
        "namesrvAddr": config.namesrv_addr,
        "proxyMode": config.proxy_mode,
        "remotingListenPort": config.proxy_remoting_port,
        "grpcServerPort": config.proxy_grpc_port,
        "remotingAccessAddr": LOOPBACK,
    }
    if config.tls_clients:
        settings.update(tls_proxy_settings(config.workdir))
    if config.acl and config.release.acl is AclStyle.ACL2 and config.proxy_mode == PROXY_MODE_CLUSTER:
        settings.update(_proxy_acl_settings(config))
    return settings


def _proxy_acl_settings(config: ClusterConfig) -> dict[str, Any]:
    """ACL 2.0 on a cluster-mode proxy, as the brokers run it, with the users and ACLs the brokers
    keep (the proxy reads rmq-proxy.json as its AuthConfig too: 5.3.3's proxy Configuration.init).

    The proxy signs everything it sends the brokers as ACL_USER (enableAclRpcHookForClusterMode
    with innerClientAuthenticationCredentials: DefaultMessagingProcessor.createForClusterMode);
    unsigned, the brokers refuse its system topic and it does not start, nor could it look up a
    user or an ACL. Forwarded requests are re-signed as ACL_USER too (AclClientRPCHook replaces the
    client's AccessKey and Signature), so the proxy itself must check each client: its remoting
    and gRPC pipelines authenticate and authorize with these settings, the metadata coming from a
    broker (ProxyAuthenticationMetadataProvider, ProxyAuthorizationMetadataProvider).
    """
    settings: dict[str, Any] = {
        "enableAclRpcHookForClusterMode": True,
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": ACL_USER, "secretKey": ACL_PASSWORD}),
        "authenticationEnabled": True,
        "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
    }
    if config.release.authorizes:
        settings.update(
            authorizationEnabled=True,
            authorizationProvider="org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
            authorizationMetadataProvider="org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
        )
    return settings


def write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


# 4.9's servers and mqadmin want a logback file of their own (LogbackStyle.HOME_CONF): a file
# appender under the JVM's user.home, which the launcher sets per server.
_HOME_CONF_LOGBACK = """<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/logs/rocketmqlogs/{role}.log</file>
    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %-5level [%thread] %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <root level="{level}"><appender-ref ref="file"/></root>
</configuration>
"""
_HOME_CONF_LEVELS = {"namesrv": "INFO", "broker": "INFO", "tools": "WARN"}


def write_home_conf_logback(workdir: Path) -> None:
    """$ROCKETMQ_HOME/conf/logback_<role>.xml for every 4.9 role (they read no other location)."""
    conf = workdir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for role, level in _HOME_CONF_LEVELS.items():
        path = conf / f"logback_{role}.xml"
        if not path.exists():
            path.write_text(_HOME_CONF_LOGBACK.format(role=role, level=level))


def jar_logback_config(workdir: Path, classpath: str, role: str, subdir: str) -> Path:
    """A 5.x role's logback file, copied from its module jar on ``classpath`` into conf/<subdir>.

    Each JVM names its own role's file through rmq.logback.configurationFile: on one shared
    classpath the proxy's would otherwise configure every server.
    """
    resource = f"rmq.{role}.logback.xml"
    out = workdir / "conf" / subdir / resource
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    for jar in jars(classpath):
        if jar.name.startswith(f"rocketmq-{role}-"):
            with zipfile.ZipFile(jar) as archive:
                out.write_bytes(archive.read(resource))
            return out
    raise FileNotFoundError(f"no jar on the classpath carries {resource}")


def logging_props(config_release: Release, workdir: Path, classpath: str, role: str, home: Path) -> dict[str, str]:
    """System properties that give one JVM its own user.home and its release's logging setup."""
    props = {"user.home": str(home), "rocketmq.home.dir": str(workdir)}
    if config_release.logback is LogbackStyle.HOME_CONF:
        write_home_conf_logback(workdir)
    else:
        props["rmq.logback.configurationFile"] = str(
            jar_logback_config(workdir, classpath, role, config_release.version)
        )
    return props


def namesrv_name(index: int) -> str:
    """The first name server is ``namesrv`` (its name before there could be more), then namesrv-2..."""
    return "namesrv" if index == 0 else f"namesrv-{index + 1}"


def config_to_json(config: ClusterConfig) -> dict[str, Any]:
    """The config as the cluster's state file records it."""
    data = dataclasses.asdict(config)
    data["workdir"] = str(config.workdir)
    return data


def config_from_json(data: dict[str, Any]) -> ClusterConfig:
    """The config a state file recorded."""
    data = dict(data)
    data["workdir"] = Path(data["workdir"])
    data["broker_ports"] = tuple(data["broker_ports"])
    data["extra_namesrv_ports"] = tuple(data.get("extra_namesrv_ports", ()))
    # A cluster recorded before the version switch ran the default release.
    data.setdefault("version", DEFAULT_VERSION)
    # And one recorded before the store switch kept its queues in files.
    data.setdefault("consume_queue_store", STORE_FILE)
    return ClusterConfig(**data)

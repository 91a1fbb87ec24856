"""Start and stop a real Apache RocketMQ on loopback from the Maven Central jars.

The tests, benchmarks and demo all run against this cluster: a name server, one or two brokers
(``broker-a``, ``broker-b``) in one cluster and, on request, the 5.x proxy in local mode. Each
server runs in its own JVM with a small heap; stores, logs and configs live under one work
directory, and ``stop`` ends exactly the processes that ``start`` recorded, by pid.

Usage::

    python -m integration.cluster start [--brokers 2] [--proxy] [--property-filter] ...
    python -m integration.cluster status
    python -m integration.cluster stop
    python -m integration.cluster tool produce --topic T --count 10   # the Java test tool
    python -m integration.cluster mqadmin consumerProgress -g G       # RocketMQ's mqadmin
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTEGRATION_DIR = Path(__file__).resolve().parent
POM = INTEGRATION_DIR / "pom.xml"
TARGET = INTEGRATION_DIR / "target"
TOOL_JAR = TARGET / "rocketmq-spark-it-tool.jar"
CLASSPATH_FILE = TARGET / "classpath.txt"
DEFAULT_WORKDIR = INTEGRATION_DIR / "work"
STATE_FILE_NAME = "cluster.json"
BUILD_LOCK_NAME = ".build.lock"

CLUSTER_NAME = "DefaultCluster"
BROKER_NAMES = ("broker-a", "broker-b")
LOOPBACK = "127.0.0.1"

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
TOOL_MAIN = "io.rocketmqspark.it.Tool"

NAMESRV_READY = "The Name Server boot success"
BROKER_READY = "boot success"
PROXY_READY = "rocketmq-proxy startup successfully"
PROXY_MODE_CLUSTER = "cluster"
PROXY_MODE_LOCAL = "local"

# RocketMQ 5.3 reaches into JDK internals (direct buffers, Netty); JDK 17 denies that unless
# these packages are opened. See docs/running-rocketmq.md.
JDK17_FLAGS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
)
NAMESRV_HEAP = ("-Xms128m", "-Xmx256m")
BROKER_HEAP = ("-Xms512m", "-Xmx512m", "-XX:MaxDirectMemorySize=1g")
PROXY_HEAP = ("-Xms256m", "-Xmx512m")
TOOL_HEAP = ("-Xms64m", "-Xmx512m")

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.2
LOG_TAIL_LINES = 40

# Broker ports: RocketMQ also binds listenPort-2 (fast channel) and listenPort+1 (HA), so the
# second broker sits ten ports above the first.
# ROCKETMQ_PORT_OFFSET moves every port the harness picks (these defaults and the tests' own
# clusters) by the same amount, so two checkouts can run their tests on one machine at once.
PORT_OFFSET = int(os.environ.get("ROCKETMQ_PORT_OFFSET", "0"))


def shifted(port: int) -> int:
    """A harness port moved by ROCKETMQ_PORT_OFFSET."""
    return port + PORT_OFFSET


DEFAULT_NAMESRV_PORT = shifted(9876)
DEFAULT_BROKER_PORTS = (shifted(10911), shifted(10921))
DEFAULT_PROXY_REMOTING_PORT = shifted(8080)
DEFAULT_PROXY_GRPC_PORT = shifted(8081)
FAST_CHANNEL_PORT_OFFSET = -2
HA_PORT_OFFSET = 1

# A known ACL 2.0 user for authentication tests.
ACL_USER = "rocketmq"
ACL_PASSWORD = "12345678"

COMMIT_LOG_FILE_BYTES = 64 * 1024 * 1024
SHORT_RETENTION_COMMIT_LOG_FILE_BYTES = 1024 * 1024
CONSUME_QUEUE_ENTRY_BYTES = 20
CONSUME_QUEUE_FILE_ENTRIES = 30_000


class ClusterError(RuntimeError):
    """The cluster could not be built, started, stopped or used."""


@dataclass
class ClusterConfig:
    """What to start. Every switch a later test may need is a field here."""

    workdir: Path = DEFAULT_WORKDIR
    brokers: int = 2
    proxy: bool = False
    # "cluster": the proxy is its own JVM forwarding to the brokers (pull and offsets work);
    # "local": it embeds broker-a, but then answers PULL_MESSAGE with "request is not
    # implemented in LocalMessageService", so the connector's tests use cluster mode.
    proxy_mode: str = "cluster"
    namesrv_port: int = DEFAULT_NAMESRV_PORT
    broker_ports: tuple[int, ...] = DEFAULT_BROKER_PORTS
    proxy_remoting_port: int = DEFAULT_PROXY_REMOTING_PORT
    proxy_grpc_port: int = DEFAULT_PROXY_GRPC_PORT
    property_filter: bool = False
    acl: bool = False
    short_retention: bool = False
    max_transfer_count_in_memory: int | None = None
    extra_broker_settings: dict[str, str] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return f"{LOOPBACK}:{self.namesrv_port}"

    @property
    def proxy_addr(self) -> str:
        return f"{LOOPBACK}:{self.proxy_remoting_port}"

    def broker_addr(self, index: int) -> str:
        return f"{LOOPBACK}:{self.broker_ports[index]}"


# --------------------------------------------------------------------------- build


def _is_fresh() -> bool:
    if not (TOOL_JAR.exists() and CLASSPATH_FILE.exists()):
        return False
    built = min(TOOL_JAR.stat().st_mtime, CLASSPATH_FILE.stat().st_mtime)
    return all(src.stat().st_mtime <= built for src in [POM, *INTEGRATION_DIR.glob("tool/src/**/*.java")])


def ensure_built(force: bool = False) -> None:
    """Build the tool jar and the classpath file unless they are newer than their sources.

    Tests run the tool from several processes at once; a lock keeps them from building into the
    same target directory together, and whoever waited finds the build done.
    """
    if not force and _is_fresh():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("Maven (mvn) is not on PATH; install it to build the RocketMQ test tooling")
    TARGET.mkdir(exist_ok=True)
    with open(TARGET / BUILD_LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and _is_fresh():
            return
        result = subprocess.run(
            [mvn, "-q", "-B", "-f", str(POM), "package"], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ClusterError(f"mvn package failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        # Maven leaves up-to-date outputs untouched; mark them as built now, or every later
        # call would find them older than the sources and build again.
        for output in (TOOL_JAR, CLASSPATH_FILE):
            output.touch()


def classpath() -> str:
    ensure_built()
    return f"{TOOL_JAR}{os.pathsep}{CLASSPATH_FILE.read_text().strip()}"


def java_command(main: str, heap: Sequence[str], system_props: dict[str, str], args: Sequence[str]) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise ClusterError("java is not on PATH; RocketMQ needs a JDK (17 is tested)")
    props = [f"-D{k}={v}" for k, v in system_props.items()]
    return [java, *heap, *JDK17_FLAGS, *props, "-cp", classpath(), main, *args]


# ------------------------------------------------------------------------- configs


def broker_settings(config: ClusterConfig, index: int) -> dict[str, str]:
    """broker.conf for one broker; the defaults are sized for a test machine, not production."""
    name = BROKER_NAMES[index]
    store = config.workdir / "store" / name
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
        settings.update(
            authenticationEnabled="true",
            authenticationProvider="org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
            authenticationMetadataProvider=(
                "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
            ),
            initAuthenticationUser=json.dumps({"username": ACL_USER, "password": ACL_PASSWORD}),
            innerClientAuthenticationCredentials=json.dumps({"accessKey": ACL_USER, "secretKey": ACL_PASSWORD}),
            authConfigPath=str(store / "auth"),
        )
    settings.update(config.extra_broker_settings)
    return settings


def proxy_settings(config: ClusterConfig) -> dict[str, Any]:
    return {
        "rocketMQClusterName": CLUSTER_NAME,
        "namesrvAddr": config.namesrv_addr,
        "proxyMode": config.proxy_mode,
        "remotingListenPort": config.proxy_remoting_port,
        "grpcServerPort": config.proxy_grpc_port,
        "remotingAccessAddr": LOOPBACK,
    }


def write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def logback_config(workdir: Path, role: str) -> Path:
    """Each JVM gets its own role's logback file; on one shared classpath the proxy's would win."""
    resource = f"rmq.{role}.logback.xml"
    out = workdir / "conf" / resource
    if out.exists():
        return out
    for entry in CLASSPATH_FILE.read_text().strip().split(os.pathsep):
        if f"rocketmq-{role}-" in Path(entry).name and entry.endswith(".jar"):
            with zipfile.ZipFile(entry) as jar:
                out.write_bytes(jar.read(resource))
            return out
    raise ClusterError(f"no jar on the classpath carries {resource}")


# ------------------------------------------------------------------------ processes


@dataclass
class Server:
    """One JVM the launcher started: enough to wait for it, report on it and stop it."""

    role: str
    name: str
    pid: int
    ports: list[int]
    out_file: str
    ready_line: list[str]

    def alive(self) -> bool:
        return process_is(self.pid, self.out_file)


def process_is(pid: int, marker: str) -> bool:
    """True if pid is alive and is the process we started, not a stranger that reused the pid.

    The java launcher may re-exec itself right after start, and for that moment its command line
    reads empty; an empty command line therefore counts as ours. A zombie counts as gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state == "Z":
        _reap(pid)
        return False
    workdir = str(Path(marker).parent.parent)
    return not cmdline or workdir.encode() in cmdline


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(POLL_S)
        return sock.connect_ex((LOOPBACK, port)) == 0


def tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def spawn(config: ClusterConfig, role: str, name: str, main: str, heap: Sequence[str], args: Sequence[str],
          ports: list[int], ready: list[str]) -> Server:
    home = config.workdir / "home" / name
    home.mkdir(parents=True, exist_ok=True)
    out_file = config.workdir / "logs" / f"{name}.out"
    props = {
        "user.home": str(home),
        "rocketmq.home.dir": str(config.workdir),
        "rmq.logback.configurationFile": str(logback_config(config.workdir, role)),
    }
    cmd = java_command(main, heap, props, args)
    with open(out_file, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=str(config.workdir), start_new_session=True,
            env={**os.environ, "ROCKETMQ_HOME": str(config.workdir)},
        )
    return Server(role=role, name=name, pid=proc.pid, ports=ports, out_file=str(out_file), ready_line=ready)


def wait_ready(server: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        if not server.alive():
            raise ClusterError(f"{server.role} (pid {server.pid}) exited during start-up:\n{tail(server.out_file)}")
        text = Path(server.out_file).read_text(errors="replace")
        if all(line in text for line in server.ready_line) and all(port_open(p) for p in server.ports):
            return
        time.sleep(POLL_S)
    raise ClusterError(f"{server.role} (pid {server.pid}) not ready after {READY_TIMEOUT_S:.0f}s:\n"
                       f"{tail(server.out_file)}")


# --------------------------------------------------------------------------- cluster


class Cluster:
    """A running (or startable) RocketMQ cluster described by a ClusterConfig."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.servers: list[Server] = []

    @property
    def state_file(self) -> Path:
        return self.config.workdir / STATE_FILE_NAME

    @property
    def namesrv_addr(self) -> str:
        return self.config.namesrv_addr

    def start(self, keep_data: bool = False) -> Cluster:
        """Start every server and wait until each is ready; on failure stop what was started."""
        cfg = self.config
        if self.state_file.exists():
            raise ClusterError(f"a cluster is already recorded in {self.state_file}; stop it first")
        if cfg.brokers not in (1, 2):
            raise ClusterError("brokers must be 1 or 2")
        busy = [p for p in self.all_ports() if port_open(p)]
        if busy:
            raise ClusterError(f"ports already in use on {LOOPBACK}: {busy}; stop what holds them "
                               "or choose other ports")
        ensure_built()
        if not keep_data:
            for sub in ("store", "home", "logs", "conf"):
                shutil.rmtree(cfg.workdir / sub, ignore_errors=True)
        for sub in ("logs", "conf"):
            (cfg.workdir / sub).mkdir(parents=True, exist_ok=True)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            namesrv = spawn(cfg, "namesrv", "namesrv", NAMESRV_MAIN, NAMESRV_HEAP,
                            self._namesrv_args(), [cfg.namesrv_port], [NAMESRV_READY])
            self._record(namesrv)
            wait_ready(namesrv, deadline)
            brokers = [self._spawn_broker(i) for i in range(cfg.brokers)]
            deadline = time.monotonic() + READY_TIMEOUT_S
            for broker in brokers:
                wait_ready(broker, deadline)
            self._wait_registered(deadline)
            if cfg.proxy and cfg.proxy_mode == PROXY_MODE_CLUSTER:
                # Started last: a cluster-mode proxy routes through the name server at once.
                proxy = self._spawn_cluster_proxy()
                wait_ready(proxy, time.monotonic() + READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _namesrv_args(self) -> list[str]:
        conf = self.config.workdir / "conf" / "namesrv.conf"
        write_properties(conf, {"listenPort": str(self.config.namesrv_port)})
        return ["-c", str(conf)]

    def _spawn_broker(self, index: int) -> Server:
        cfg = self.config
        name = BROKER_NAMES[index]
        conf = cfg.workdir / "conf" / f"{name}.conf"
        write_properties(conf, broker_settings(cfg, index))
        port = cfg.broker_ports[index]
        ports = [port, port + FAST_CHANNEL_PORT_OFFSET]
        if index == 0 and cfg.proxy and cfg.proxy_mode == PROXY_MODE_LOCAL:
            args = ["-pm", PROXY_MODE_LOCAL, "-bc", str(conf), "-n", cfg.namesrv_addr,
                    "-pc", str(self._write_proxy_conf())]
            server = spawn(cfg, "proxy", name, PROXY_MAIN, BROKER_HEAP, args,
                           [*ports, cfg.proxy_remoting_port, cfg.proxy_grpc_port], [PROXY_READY])
        else:
            args = ["-c", str(conf), "-n", cfg.namesrv_addr]
            server = spawn(cfg, "broker", name, BROKER_MAIN, BROKER_HEAP, args, ports, [BROKER_READY])
        self._record(server)
        return server

    def _write_proxy_conf(self) -> Path:
        proxy_conf = self.config.workdir / "conf" / "rmq-proxy.json"
        proxy_conf.write_text(json.dumps(proxy_settings(self.config), indent=2))
        return proxy_conf

    def _spawn_cluster_proxy(self) -> Server:
        cfg = self.config
        args = ["-pm", PROXY_MODE_CLUSTER, "-n", cfg.namesrv_addr, "-pc", str(self._write_proxy_conf())]
        server = spawn(cfg, "proxy", "proxy", PROXY_MAIN, PROXY_HEAP, args,
                       [cfg.proxy_remoting_port, cfg.proxy_grpc_port], [PROXY_READY])
        self._record(server)
        return server

    def _wait_registered(self, deadline: float) -> None:
        """Brokers are usable once the name server lists them; the tool asks it directly."""
        expected = set(BROKER_NAMES[: self.config.brokers])
        while time.monotonic() < deadline:
            out = subprocess.run(
                java_command(MQADMIN_MAIN, TOOL_HEAP, self._client_props("mqadmin"),
                             ["clusterList", "-n", self.namesrv_addr]),
                capture_output=True, text=True, check=False,
            ).stdout
            if all(name in out for name in expected):
                return
            time.sleep(POLL_S)
        raise ClusterError(f"brokers {sorted(expected)} never registered with the name server")

    def all_ports(self) -> list[int]:
        cfg = self.config
        ports = [cfg.namesrv_port]
        for port in cfg.broker_ports[: cfg.brokers]:
            ports += [port, port + FAST_CHANNEL_PORT_OFFSET, port + HA_PORT_OFFSET]
        if cfg.proxy:
            ports += [cfg.proxy_remoting_port, cfg.proxy_grpc_port]
        return ports

    def _record(self, server: Server) -> None:
        self.servers.append(server)
        self._save()

    def _save(self) -> None:
        state = {"config": _config_to_json(self.config), "servers": [dataclasses.asdict(s) for s in self.servers]}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, workdir: Path = DEFAULT_WORKDIR) -> Cluster:
        """The cluster recorded in workdir by an earlier start."""
        state_file = workdir / STATE_FILE_NAME
        if not state_file.exists():
            raise ClusterError(f"no cluster recorded in {workdir}")
        state = json.loads(state_file.read_text())
        cluster = cls(_config_from_json(state["config"]))
        cluster.servers = [Server(**s) for s in state["servers"]]
        return cluster

    def stop(self) -> None:
        """End exactly the recorded processes, newest first, then forget them."""
        _terminate(list(reversed(self.servers)))
        self.servers = []
        self.state_file.unlink(missing_ok=True)

    def stop_broker(self, name: str) -> None:
        """Stop one broker (its store stays), as an operator restarting it would."""
        server = next((s for s in self.servers if s.name == name), None)
        if server is None:
            raise ClusterError(f"no running server named {name}")
        _terminate([server])
        self.servers.remove(server)
        self._save()

    def start_broker(self, name: str) -> None:
        """Start a stopped broker again on its old store and ports."""
        index = BROKER_NAMES.index(name)
        wait_ready(self._spawn_broker(index), time.monotonic() + READY_TIMEOUT_S)

    def status(self) -> list[dict[str, Any]]:
        return [{"role": s.role, "pid": s.pid, "ports": s.ports, "alive": s.alive(),
                 "ports_open": [port_open(p) for p in s.ports]} for s in self.servers]

    # ----------------------------------------------------------------- clients

    def _client_props(self, name: str) -> dict[str, str]:
        home = self.config.workdir / "home" / name
        home.mkdir(parents=True, exist_ok=True)
        return {"user.home": str(home), "rocketmq.client.logLevel": "WARN",
                "rmq.logback.configurationFile": str(logback_config(self.config.workdir, "tools"))}

    def tool(self, command: str, *args: str, check: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Run the Java test tool against this cluster; return its JSON lines."""
        return run_tool(self.namesrv_addr, command, *args, workdir=self.config.workdir, check=check,
                        timeout=timeout)

    def mqadmin(self, *args: str, check: bool = True) -> str:
        """Run RocketMQ's own mqadmin against this cluster; return its stdout."""
        cmd = java_command(MQADMIN_MAIN, TOOL_HEAP, self._client_props("mqadmin"),
                           [*args, "-n", self.namesrv_addr])
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise ClusterError(f"mqadmin {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result.stdout


def run_tool(namesrv_addr: str, command: str, *args: str, workdir: Path = DEFAULT_WORKDIR,
             check: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
    """Run the Java test tool against any name server; return its JSON lines."""
    home = workdir / "home" / "tool"
    home.mkdir(parents=True, exist_ok=True)
    (workdir / "conf").mkdir(parents=True, exist_ok=True)
    props = {"user.home": str(home), "rmq.logback.configurationFile": str(logback_config(workdir, "tools"))}
    cmd = java_command(TOOL_MAIN, TOOL_HEAP, props, [command, "--ns", namesrv_addr, *args])
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise ClusterError(f"tool {command} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _terminate(servers: list[Server]) -> None:
    """SIGTERM each server, wait for all, SIGKILL what is still there after STOP_TIMEOUT_S."""
    for server in servers:
        if server.alive():
            os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for server in servers:
        while server.alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if server.alive():
            os.kill(server.pid, signal.SIGKILL)
        _reap(server.pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _config_to_json(config: ClusterConfig) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    data["workdir"] = str(config.workdir)
    return data


def _config_from_json(data: dict[str, Any]) -> ClusterConfig:
    data = dict(data)
    data["workdir"] = Path(data["workdir"])
    data["broker_ports"] = tuple(data["broker_ports"])
    return ClusterConfig(**data)


# ------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m integration.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("ROCKETMQ_WORKDIR", DEFAULT_WORKDIR)))
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start name server, brokers and optionally the proxy")
    start.add_argument("--brokers", type=int, default=2, choices=(1, 2))
    start.add_argument("--proxy", action="store_true", help="start the 5.x proxy (remoting and gRPC ports)")
    start.add_argument("--proxy-mode", choices=(PROXY_MODE_CLUSTER, PROXY_MODE_LOCAL), default=PROXY_MODE_CLUSTER,
                       help="cluster: its own JVM in front of the brokers; local: embeds broker-a (serves no pulls)")
    start.add_argument("--namesrv-port", type=int, default=DEFAULT_NAMESRV_PORT)
    start.add_argument("--broker-ports", default=",".join(map(str, DEFAULT_BROKER_PORTS)))
    start.add_argument("--proxy-remoting-port", type=int, default=DEFAULT_PROXY_REMOTING_PORT)
    start.add_argument("--proxy-grpc-port", type=int, default=DEFAULT_PROXY_GRPC_PORT)
    start.add_argument("--property-filter", action="store_true", help="enablePropertyFilter (SQL92)")
    start.add_argument("--acl", action="store_true", help=f"ACL 2.0 authentication, user {ACL_USER}")
    start.add_argument("--short-retention", action="store_true", help="commit-log files expire when full")
    start.add_argument("--max-transfer-count", type=int, default=None,
                       help="maxTransferCountOnMessageInMemory")
    start.add_argument("--keep-data", action="store_true", help="keep the stores of an earlier run")
    sub.add_parser("stop", help="stop the recorded cluster")
    sub.add_parser("status", help="print the recorded servers")
    sub.add_parser("build", help="build the tool jar and classpath")
    for name in ("tool", "mqadmin"):
        p = sub.add_parser(name, help=f"run the {name} against the recorded cluster")
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "build":
        ensure_built(force=True)
        return 0
    if opts.command == "start":
        config = ClusterConfig(
            workdir=opts.workdir, brokers=opts.brokers, proxy=opts.proxy, proxy_mode=opts.proxy_mode,
            namesrv_port=opts.namesrv_port,
            broker_ports=tuple(int(p) for p in opts.broker_ports.split(",")),
            proxy_remoting_port=opts.proxy_remoting_port, proxy_grpc_port=opts.proxy_grpc_port,
            property_filter=opts.property_filter, acl=opts.acl, short_retention=opts.short_retention,
            max_transfer_count_in_memory=opts.max_transfer_count,
        )
        cluster = Cluster(config).start(keep_data=opts.keep_data)
        print(json.dumps({"namesrv": cluster.namesrv_addr, "servers": cluster.status()}, indent=2))
        return 0
    if opts.command == "stop":
        if not (opts.workdir / STATE_FILE_NAME).exists():
            print("no cluster recorded; nothing to stop")
            return 0
        Cluster.load(opts.workdir).stop()
        return 0
    cluster = Cluster.load(opts.workdir)
    if opts.command == "status":
        print(json.dumps({"namesrv": cluster.namesrv_addr, "servers": cluster.status()}, indent=2))
        return 0 if all(s["alive"] for s in cluster.status()) else 1
    if opts.command == "tool":
        for row in cluster.tool(*opts.args):
            print(json.dumps(row, ensure_ascii=False))
        return 0
    print(cluster.mqadmin(*opts.args), end="")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)

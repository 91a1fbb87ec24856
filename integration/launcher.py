"""The servers of one RocketMQ cluster on loopback: ``Cluster`` starts them from the Maven Central
jars (a name server or several, one master per broker name, on request the 5.x proxy; each a JVM
with a small heap and its store, logs and config under one work directory), records them, and
stops, kills, freezes and restarts them by pid. replicated.py builds its layouts on this class;
cluster.py (the command line) picks between the two, so imports run one way only.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from integration.build import BuildError, ensure_built, server_classpath
from integration.cds import sharing
from integration.cluster_config import (
    BROKER_HEAP,
    BROKER_MAIN,
    BROKER_NAMES,
    BROKER_READY,
    DEFAULT_WORKDIR,
    FAST_CHANNEL_PORT_OFFSET,
    HA_PORT_OFFSET,
    NAMESRV_HEAP,
    NAMESRV_MAIN,
    NAMESRV_READY,
    PROXY_HEAP,
    PROXY_MAIN,
    PROXY_MODE_CLUSTER,
    PROXY_MODE_LOCAL,
    PROXY_READY,
    ROCKSDB_STORE_MAJOR,
    STORE_ENV,
    STORE_FILE,
    ClusterConfig,
    ClusterError,
    broker_settings,
    broker_store,
    config_from_json,
    config_to_json,
    logging_props,
    namesrv_name,
    proxy_settings,
    write_plain_acl,
    write_properties,
    write_tools_credentials,
)
from integration.constants import LOOPBACK, OUTPUT_TAIL_CHARS, POLL_S
from integration.javatool import forget_mqadmin, run_mqadmin, run_tool
from integration.processes import (
    READY_TIMEOUT_S,
    ProcessError,
    Server,
    java_command,
    kill,
    port_open,
    send_signal,
    spawn,
    terminate,
    wait_ready,
)
from integration.tls_setup import (
    CA_CERT,
    TLS_DIR,
    CertificateToolError,
    client_properties,
    make_server_certificates,
    server_properties,
)
from integration.versions import AclStyle, UnknownVersionError

STATE_FILE_NAME = "cluster.json"
MQADMIN_FAILED = "SubCommandException"


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

    @property
    def version(self) -> str:
        return self.config.version

    @property
    def ca_cert(self) -> Path:
        """The PEM certificate of the CA that signs the servers' certificates (with ``tls``)."""
        return self.config.workdir / TLS_DIR / CA_CERT

    def start(self, keep_data: bool = False) -> Cluster:
        """Start every server and wait until each is ready; on failure stop what was started."""
        cfg = self.config
        if self.state_file.exists():
            raise ClusterError(f"a cluster is already recorded in {self.state_file}; stop it first")
        if cfg.brokers not in (0, 1, 2):
            raise ClusterError("brokers must be 0 (a name server alone), 1 or 2")
        if cfg.proxy and not cfg.release.has_proxy:
            raise ClusterError(f"RocketMQ {cfg.version} has no proxy; start it without one")
        if cfg.consume_queue_store != STORE_FILE and cfg.release.major < ROCKSDB_STORE_MAJOR:
            raise ClusterError(
                f"RocketMQ {cfg.version} keeps its consume queues in files only (no storeType); "
                f"start it with {STORE_ENV}={STORE_FILE} or without --store"
            )
        busy = [p for p in self.all_ports() if port_open(p)]
        if busy:
            raise ClusterError(
                f"ports already in use on {LOOPBACK}: {busy}; stop what holds them or choose other ports"
            )
        _built(cfg.version)
        if not keep_data:
            for sub in ("store", "home", "logs", "conf", TLS_DIR):
                shutil.rmtree(cfg.workdir / sub, ignore_errors=True)
        for sub in ("logs", "conf"):
            (cfg.workdir / sub).mkdir(parents=True, exist_ok=True)
        if cfg.acl:
            write_tools_credentials(cfg.workdir)
        if cfg.acl and cfg.release.acl is AclStyle.PLAIN:
            write_plain_acl(cfg.workdir)
        try:
            if cfg.tls_clients:
                make_server_certificates(cfg.workdir)
            deadline = time.monotonic() + READY_TIMEOUT_S
            for namesrv in [self._spawn_namesrv(i) for i in range(len(cfg.namesrv_ports))]:
                wait_ready(namesrv, deadline)
            brokers = self._spawn_brokers()
            deadline = time.monotonic() + READY_TIMEOUT_S
            for broker in brokers:
                wait_ready(broker, deadline)
            if brokers:
                self._wait_brokers(deadline)
            if cfg.proxy and cfg.proxy_mode == PROXY_MODE_CLUSTER:
                # Started last: a cluster-mode proxy routes through the name server at once.
                args = ["-pm", PROXY_MODE_CLUSTER, "-n", cfg.namesrv_addr, "-pc", str(self._write_proxy_conf())]
                proxy = self._spawn(
                    "proxy",
                    "proxy",
                    PROXY_MAIN,
                    PROXY_HEAP,
                    args,
                    [cfg.proxy_remoting_port, cfg.proxy_grpc_port],
                    [PROXY_READY],
                )
                wait_ready(proxy, time.monotonic() + READY_TIMEOUT_S)
        except (ProcessError, CertificateToolError) as err:
            self.stop()
            raise ClusterError(str(err)) from err
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(
        self,
        role: str,
        name: str,
        main: str,
        heap: Sequence[str],
        args: Sequence[str],
        ports: list[int],
        ready: list[str],
    ) -> Server:
        """One server JVM on the release's classpath, with its own user.home and logging."""
        cfg = self.config
        home = cfg.workdir / "home" / name
        home.mkdir(parents=True, exist_ok=True)
        classpath = server_classpath(cfg.version)
        props = logging_props(cfg.release, cfg.workdir, classpath, role, home)
        if cfg.tls is not None:
            props.update(server_properties(cfg.workdir, cfg.tls))
        shared, to_dump = sharing(shutil.which("java"), classpath, main)
        cmd = java_command(main, classpath, heap, [*cfg.release.jvm_flags, *shared], props, args)
        server = spawn(cfg.workdir, role, name, cmd, ports, ready, to_dump)
        self._record(server)
        return server

    def _spawn_namesrv(self, index: int) -> Server:
        name = namesrv_name(index)
        port = self.config.namesrv_ports[index]
        conf = self.config.workdir / "conf" / f"{name}.conf"
        write_properties(conf, {"listenPort": str(port)})
        return self._spawn("namesrv", name, NAMESRV_MAIN, NAMESRV_HEAP, ["-c", str(conf)], [port], [NAMESRV_READY])

    def _spawn_brokers(self) -> list[Server]:
        """Every broker JVM of the layout: here one master per broker name (see replicated.py)."""
        return [self._spawn_broker(i) for i in range(self.config.brokers)]

    def _wait_brokers(self, deadline: float) -> None:
        """Until the name servers list every broker name the layout serves."""
        self._wait_registered(deadline)

    def _spawn_broker(self, index: int) -> Server:
        cfg = self.config
        name = BROKER_NAMES[index]
        conf = cfg.workdir / "conf" / f"{name}.conf"
        write_properties(conf, broker_settings(cfg, index))
        port = cfg.broker_ports[index]
        ports = [port, port + FAST_CHANNEL_PORT_OFFSET]
        if index == 0 and cfg.proxy and cfg.proxy_mode == PROXY_MODE_LOCAL:
            args = [
                "-pm",
                PROXY_MODE_LOCAL,
                "-bc",
                str(conf),
                "-n",
                cfg.namesrv_addr,
                "-pc",
                str(self._write_proxy_conf()),
            ]
            return self._spawn(
                "proxy",
                name,
                PROXY_MAIN,
                BROKER_HEAP,
                args,
                [*ports, cfg.proxy_remoting_port, cfg.proxy_grpc_port],
                [PROXY_READY],
            )
        args = ["-c", str(conf), "-n", cfg.namesrv_addr]
        return self._spawn("broker", name, BROKER_MAIN, BROKER_HEAP, args, ports, [BROKER_READY])

    def _write_proxy_conf(self) -> Path:
        proxy_conf = self.config.workdir / "conf" / "rmq-proxy.json"
        proxy_conf.write_text(json.dumps(proxy_settings(self.config), indent=2))
        return proxy_conf

    def _wait_registered(
        self,
        deadline: float,
        ports: Sequence[int] | None = None,
        names: Sequence[str] | None = None,
        listed: bool = True,
    ) -> None:
        """Until the name servers (all, or those on ``ports``) list the brokers (all, or ``names``),
        or with ``listed=False`` no longer list them; mqadmin asks each name server directly."""
        expected = BROKER_NAMES[: self.config.brokers] if names is None else names
        for port in self.config.namesrv_ports if ports is None else ports:
            while True:
                out = self.mqadmin("clusterList", check=False, namesrv=f"{LOOPBACK}:{port}")
                if all((name in out) is listed for name in expected):
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"brokers {sorted(expected)} still {'un' if listed else ''}registered "
                        f"with the name server on port {port}"
                    )
                time.sleep(POLL_S)

    def all_ports(self) -> list[int]:
        cfg = self.config
        ports = list(cfg.namesrv_ports)
        for port in cfg.broker_ports[: cfg.brokers]:
            ports += [port, port + FAST_CHANNEL_PORT_OFFSET, port + HA_PORT_OFFSET]
        if cfg.proxy:
            ports += [cfg.proxy_remoting_port, cfg.proxy_grpc_port]
        return ports

    def _record(self, server: Server) -> None:
        self.servers.append(server)
        self._save()

    def _save(self) -> None:
        state = {"config": config_to_json(self.config), "servers": [dataclasses.asdict(s) for s in self.servers]}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, workdir: Path = DEFAULT_WORKDIR) -> Cluster:
        """The cluster recorded in workdir by an earlier start."""
        state_file = workdir / STATE_FILE_NAME
        if not state_file.exists():
            raise ClusterError(f"no cluster recorded in {workdir}")
        state = json.loads(state_file.read_text())
        cluster = cls(config_from_json(state["config"]))
        cluster.servers = [Server(**s) for s in state["servers"]]
        return cluster

    def stop(self, at_once: bool = False) -> None:
        """End exactly the recorded processes, newest first, then forget them. ``at_once`` kills
        them without the shutdown hooks that take a broker 10 s or more: for a test's own
        cluster, whose stores nobody opens again."""
        if at_once:
            for server in reversed(self.servers):
                kill(server)
        else:
            terminate(list(reversed(self.servers)))
        self.servers = []
        self.state_file.unlink(missing_ok=True)
        forget_mqadmin(self.config.workdir)

    def stop_broker(self, name: str) -> None:
        """Stop one broker (its store stays), as an operator restarting it would."""
        self._end(name, lambda server: terminate([server]))

    def kill(self, name: str) -> None:
        """SIGKILL one server, as a crash would: no shutdown hook runs, its store stays as it was."""
        self._end(name, kill)

    def freeze(self, name: str) -> None:
        """SIGSTOP one server, as a hung host or a long GC pause would: its process, ports and
        connections stay, nothing answers, and the name servers keep routing to it until its
        registration expires (two minutes)."""
        send_signal(self._server(name), signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        """SIGCONT a server ``freeze`` stopped (harmless on one that runs)."""
        send_signal(self._server(name), signal.SIGCONT)

    def running(self, name: str) -> bool:
        """Whether the named server was started and is not stopped or killed since."""
        return any(s.name == name for s in self.servers)

    def broker_store(self, name: str) -> Path:
        """The store directory of a broker (its commit log, queues and ``config/`` files)."""
        return broker_store(self.config.workdir, name)

    def _server(self, name: str) -> Server:
        server = next((s for s in self.servers if s.name == name), None)
        if server is None:
            raise ClusterError(f"no running server named {name}")
        return server

    def _end(self, name: str, how: Callable[[Server], None]) -> None:
        server = self._server(name)
        how(server)
        self.servers.remove(server)
        self._save()
        if name in BROKER_NAMES:  # gone once the name servers see its connections close
            self._wait_registered(time.monotonic() + READY_TIMEOUT_S, names=[name], listed=False)

    def restart(self, name: str) -> None:
        """Start a stopped or killed broker or name server again, on its old config, store and ports."""
        if any(s.name == name for s in self.servers):
            raise ClusterError(f"{name} is running; stop or kill it first")
        namesrvs = [namesrv_name(i) for i in range(len(self.config.namesrv_ports))]
        deadline = time.monotonic() + READY_TIMEOUT_S
        if name in namesrvs:
            index = namesrvs.index(name)
            wait_ready(self._spawn_namesrv(index), deadline)
            # It knows no broker until each registers again (every registerNameServerPeriod).
            self._wait_registered(deadline, [self.config.namesrv_ports[index]])
        elif name in BROKER_NAMES[: self.config.brokers]:
            wait_ready(self._spawn_broker(BROKER_NAMES.index(name)), deadline)
            # Clients find it once it registers, which can come a registration period after boot.
            self._wait_registered(deadline, names=[name])
        else:
            raise ClusterError(f"no server named {name} in this cluster")

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "role": s.role,
                "pid": s.pid,
                "ports": s.ports,
                "alive": s.alive(),
                "ports_open": [port_open(p) for p in s.ports],
            }
            for s in self.servers
        ]

    # ----------------------------------------------------------------- clients

    def tool(self, command: str, *args: str, check: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Run the Java test tool against this cluster; return its JSON lines."""
        return run_tool(
            self.namesrv_addr,
            command,
            *args,
            workdir=self.config.workdir,
            check=check,
            timeout=timeout,
            tls=self.config.tls_clients,
        )

    def mqadmin(self, *args: str, check: bool = True, namesrv: str | None = None) -> str:
        """Run the release's own mqadmin against this cluster (or one of its name servers); return
        its stdout."""
        cfg = self.config
        home = cfg.workdir / "home" / "mqadmin"
        home.mkdir(parents=True, exist_ok=True)
        classpath = server_classpath(cfg.version)
        props = {
            **logging_props(cfg.release, cfg.workdir, classpath, "tools", home),
            "rocketmq.client.logLevel": "WARN",
            **(client_properties() if cfg.tls_clients else {}),
        }
        argv = [*args, "-n", namesrv or self.namesrv_addr]
        status, stdout, stderr = run_mqadmin(classpath, cfg.release.jvm_flags, props, argv, cfg.workdir)
        # mqadmin exits 0 when a sub-command fails; only its stderr tells.
        if check and (status != 0 or MQADMIN_FAILED in stderr):
            raise ClusterError(
                f"mqadmin {' '.join(args)} failed:\n{stdout[-OUTPUT_TAIL_CHARS:]}\n{stderr[-OUTPUT_TAIL_CHARS:]}"
            )
        return stdout


def _built(version: str) -> None:
    try:
        ensure_built(version)
    except (BuildError, UnknownVersionError) as err:
        raise ClusterError(str(err)) from err

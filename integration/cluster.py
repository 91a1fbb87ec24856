"""Start and stop a real Apache RocketMQ on loopback from the Maven Central jars.

The tests, benchmarks and ``make demo`` all run against this cluster: a name server, one or two brokers
(``broker-a``, ``broker-b``) in one cluster and, on request, the 5.x proxy. Each server runs in its
own JVM with a small heap; stores, logs and configs live under one work directory, and ``stop``
ends exactly the processes that ``start`` recorded, by pid. The release is 5.3.3 unless
``--version`` or ``ROCKETMQ_VERSION`` picks 4.9.7, 5.5.0 or 5.5.1 (see integration/versions.py).

This module is the command line and ``cluster_for``; the servers are ``Cluster``
(integration/launcher.py) and ``ReplicatedCluster`` (integration/replicated.py, built on it).
It imports both and neither imports it back; it re-exports the names the tests, fixtures and
benchmarks import from here.

Usage::

    python -m integration.cluster start [--version 4.9.7|5.3.3|5.5.0|5.5.1] [--brokers 2] [--proxy] ...
    python -m integration.cluster start --tls enforcing   # TLS only, with a test CA of the run's own
    python -m integration.cluster start --layout dledger --brokers 1   # replicas: integration/replicated.py
    python -m integration.cluster start --store rocksdb   # 5.x consume queues in RocksDB ($ROCKETMQ_STORE)
    python -m integration.cluster status
    python -m integration.cluster stop
    python -m integration.cluster tool produce --topic T --count 10   # the Java test tool
    python -m integration.cluster mqadmin consumerProgress -g G       # the release's own mqadmin
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from integration.build import BuildError, ensure_built
from integration.cluster_config import (
    ACL_PASSWORD,
    ACL_USER,
    BROKER_NAMES,
    CLUSTER_NAME,
    CONSUME_QUEUE_STORES,
    DEFAULT_BROKER_PORTS,
    DEFAULT_NAMESRV_PORT,
    DEFAULT_PROXY_GRPC_PORT,
    DEFAULT_PROXY_REMOTING_PORT,
    DEFAULT_WORKDIR,
    LAYOUT_MASTERS,
    LAYOUTS,
    PORT_OFFSET,
    PROXY_MODE_CLUSTER,
    PROXY_MODE_LOCAL,
    STORE_ENV,
    STORE_FILE,
    ClusterConfig,
    ClusterError,
    namesrv_name,
    shifted,
)
from integration.constants import LOOPBACK, key_value
from integration.javatool import run_tool, tool_command
from integration.launcher import STATE_FILE_NAME, Cluster
from integration.processes import Server
from integration.replicated import ReplicatedCluster
from integration.tls_setup import TLS_MODES
from integration.versions import DEFAULT_VERSION, RELEASES, VERSION_ENV, UnknownVersionError

__all__ = [
    "ACL_PASSWORD",
    "ACL_USER",
    "BROKER_NAMES",
    "CLUSTER_NAME",
    "DEFAULT_BROKER_PORTS",
    "DEFAULT_NAMESRV_PORT",
    "DEFAULT_PROXY_GRPC_PORT",
    "DEFAULT_PROXY_REMOTING_PORT",
    "DEFAULT_VERSION",
    "DEFAULT_WORKDIR",
    "LOOPBACK",
    "PORT_OFFSET",
    "PROXY_MODE_CLUSTER",
    "PROXY_MODE_LOCAL",
    "RELEASES",
    "STATE_FILE_NAME",
    "VERSION_ENV",
    "Cluster",
    "ClusterConfig",
    "ClusterError",
    "ReplicatedCluster",
    "Server",
    "cluster_for",
    "ensure_built",
    "main",
    "namesrv_name",
    "run_tool",
    "shifted",
    "tool_command",
]


def cluster_for(config: ClusterConfig) -> Cluster:
    """The cluster the config describes: for a replicated layout, one that knows its replicas."""
    if config.layout == LAYOUT_MASTERS:
        return Cluster(config)
    return ReplicatedCluster(config)


# ------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m integration.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("ROCKETMQ_WORKDIR", DEFAULT_WORKDIR)))
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start name server, brokers and optionally the proxy")
    _version_option(start)
    start.add_argument("--brokers", type=int, default=2, choices=(0, 1, 2), help="0: a name server alone")
    start.add_argument("--proxy", action="store_true", help="start the 5.x proxy (remoting and gRPC ports)")
    start.add_argument(
        "--proxy-mode",
        choices=(PROXY_MODE_CLUSTER, PROXY_MODE_LOCAL),
        default=PROXY_MODE_CLUSTER,
        help="cluster: its own JVM in front of the brokers; local: embeds broker-a (serves no pulls)",
    )
    start.add_argument("--namesrv-port", type=int, default=DEFAULT_NAMESRV_PORT)
    start.add_argument("--broker-ports", default=",".join(map(str, DEFAULT_BROKER_PORTS)))
    start.add_argument("--proxy-remoting-port", type=int, default=DEFAULT_PROXY_REMOTING_PORT)
    start.add_argument("--proxy-grpc-port", type=int, default=DEFAULT_PROXY_GRPC_PORT)
    start.add_argument("--property-filter", action="store_true", help="enablePropertyFilter (SQL92)")
    start.add_argument(
        "--acl", action="store_true", help=f"authentication with user {ACL_USER}: ACL 2.0 on 5.x, plain_acl.yml on 4.9"
    )
    start.add_argument("--short-retention", action="store_true", help="commit-log files expire when full")
    start.add_argument("--max-transfer-count", type=int, default=None, help="maxTransferCountOnMessageInMemory")
    start.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=LAYOUT_MASTERS,
        help="how each broker name is served: one master, or replicas (integration/replicated.py)",
    )
    start.add_argument("--slave-read", action="store_true", help="slaveReadEnable: 5.x slaves serve pulls")
    start.add_argument(
        "--store",
        choices=CONSUME_QUEUE_STORES,
        default=None,
        help=f"where the brokers keep their consume queues; rocksdb needs 5.x (default: ${STORE_ENV}, else {STORE_FILE})",
    )
    start.add_argument("--keep-data", action="store_true", help="keep the stores of an earlier run")
    start.add_argument(
        "--broker-setting",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more line of every broker's broker.conf (repeatable), e.g. an operator's setting to try",
    )
    start.add_argument(
        "--tls",
        choices=TLS_MODES,
        default=None,
        help="tls.server.mode of every server; enforcing and permissive serve a certificate of "
        "a CA made for the run (<workdir>/tls/ca.pem); default: RocketMQ's own",
    )
    sub.add_parser("stop", help="stop the recorded cluster")
    sub.add_parser("status", help="print the recorded servers")
    build = sub.add_parser("build", help="build the tool jar and the release's classpath")
    _version_option(build)
    for name in ("tool", "mqadmin"):
        p = sub.add_parser(name, help=f"run the {name} against the recorded cluster")
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _version_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version",
        choices=tuple(RELEASES),
        default=None,
        help=f"the RocketMQ release (default: ${VERSION_ENV}, else {DEFAULT_VERSION})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "build":
        version = opts.version or ClusterConfig().version
        try:
            ensure_built(version, force=True)
        except BuildError as err:
            raise ClusterError(str(err)) from err
        return 0
    if opts.command == "start":
        config = ClusterConfig(
            workdir=opts.workdir,
            brokers=opts.brokers,
            proxy=opts.proxy,
            proxy_mode=opts.proxy_mode,
            namesrv_port=opts.namesrv_port,
            broker_ports=tuple(int(p) for p in opts.broker_ports.split(",")),
            proxy_remoting_port=opts.proxy_remoting_port,
            proxy_grpc_port=opts.proxy_grpc_port,
            property_filter=opts.property_filter,
            acl=opts.acl,
            short_retention=opts.short_retention,
            max_transfer_count_in_memory=opts.max_transfer_count,
            tls=opts.tls,
            layout=opts.layout,
            slave_read=opts.slave_read,
            extra_broker_settings=dict(opts.broker_setting),
        )
        if opts.version:
            config.version = opts.version
        if opts.store:
            config.consume_queue_store = opts.store
        cluster = cluster_for(config).start(keep_data=opts.keep_data)
        ca_cert = {"caCert": str(cluster.ca_cert)} if config.tls_clients else {}
        print(
            json.dumps(
                {"version": cluster.version, "namesrv": cluster.namesrv_addr, **ca_cert, "servers": cluster.status()},
                indent=2,
            )
        )
        return 0
    if opts.command == "stop":
        if not (opts.workdir / STATE_FILE_NAME).exists():
            print("no cluster recorded; nothing to stop")
            return 0
        Cluster.load(opts.workdir).stop()
        return 0
    cluster = Cluster.load(opts.workdir)
    if opts.command == "status":
        print(
            json.dumps(
                {"version": cluster.version, "namesrv": cluster.namesrv_addr, "servers": cluster.status()}, indent=2
            )
        )
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
    except (ClusterError, UnknownVersionError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)

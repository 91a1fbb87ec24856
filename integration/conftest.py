"""Shared fixtures: the real RocketMQ cluster, a local SparkSession, a local Spark Connect server.

The cluster is started once per test run, on first use, and stopped at the end; its RocketMQ
release is ``ROCKETMQ_VERSION`` (default 5.3.3; see integration/versions.py). Set
``ROCKETMQ_NAMESRV=host:port`` (and ``ROCKETMQ_PROXY=host:port`` for the proxy tests) to run the
tests against a cluster that is already up instead; it is then left running, and
``ROCKETMQ_VERSION`` should name its release.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.cluster import BROKER_NAMES, Cluster, ClusterConfig, shifted
from integration.connect import ConnectServer
from integration.constants import REPO
from integration.failfast import Overhead
from integration.lines import LINES, Dist, LineVenvs, build_dist
from integration.spark import local_spark
from integration.support import EARLY, ENDPOINTS, ClusterHandle, Early, own_cluster
from integration.toolserver import serve_commands
from integration.versions import release, selected_version
from tests.listeners import closed_port

# Spark allows a Python worker it starts (a data source's planner or stream runner on the driver)
# 10 s to connect back, fixed in PythonWorkerFactory with no setting. A fresh interpreter imports
# PySpark in about 0.6 CPU-s; on two cores that both CI lanes keep busy it can get too little CPU
# for that, and the query fails before any of this package's code has run. A test that fails
# with this message runs again, up to twice (pytest-rerunfailures; the report counts the reruns:
# one CI run under a load of 8 met it twice in one test); any other failure fails it.
SPARK_WORKER_START_TIMEOUT = "Python worker failed to connect back"
WORKER_START_RERUNS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(REPO / "integration"):
            item.add_marker(pytest.mark.flaky(reruns=WORKER_START_RERUNS, only_rerun=[SPARK_WORKER_START_TIMEOUT]))


# The tests' tool and mqadmin commands run in JVMs that stay for the next command
# (integration/toolserver.py).
serve_commands()
# The two-broker cluster of the tests that stop, kill, freeze or reconfigure a broker: ports of
# its own, apart from every other cluster of a run.
TWO_BROKERS_NAMESRV_PORT = shifted(11876)
TWO_BROKERS_PORTS = (shifted(12911), shifted(12921))
# The one-broker cluster with authentication on: ports of its own too.
ACL_NAMESRV_PORT = shifted(19876)
ACL_BROKER_PORT = shifted(20911)


@pytest.fixture(scope="session")
def rocketmq() -> Iterator[ClusterHandle]:
    """Two brokers (masters broker-a and broker-b), SQL92 on, transaction check-backs within
    seconds and, on 5.x, the proxy in cluster mode."""
    external = os.environ.get("ROCKETMQ_NAMESRV")
    version = selected_version()
    if external:
        yield ClusterHandle(external, os.environ.get("ROCKETMQ_PROXY"), None, version)
        return
    config = ClusterConfig(
        version=version,
        brokers=2,
        proxy=release(version).has_proxy,
        property_filter=True,
        short_transaction_checks=True,
    )
    cluster = Cluster(config)
    cluster.start()
    try:
        yield ClusterHandle(config.namesrv_addr, config.proxy_addr if config.proxy else None, cluster, version)
    finally:
        cluster.stop(at_once=True)


@pytest.fixture(params=ENDPOINTS)
def endpoint(request: pytest.FixtureRequest, rocketmq: ClusterHandle) -> str:
    """Where the test's client connects: the name server (then the brokers), or the proxy's
    remoting port; a test that asks for it runs once on each of ENDPOINTS."""
    return rocketmq.endpoint(request.param)


@pytest.fixture(scope="module")
def two_broker_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """Two brokers of a cluster of the module's own, started once for the module; tests use
    ``two_brokers``."""
    with own_cluster(
        ClusterConfig(
            workdir=tmp_path_factory.mktemp("two-brokers"),
            brokers=2,
            namesrv_port=TWO_BROKERS_NAMESRV_PORT,
            broker_ports=TWO_BROKERS_PORTS,
            timer_messages=False,
        )
    ) as handle:
        yield handle


@pytest.fixture
def two_brokers(two_broker_cluster: ClusterHandle) -> Iterator[ClusterHandle]:
    """The module's two brokers; whatever a test did to one (even failing half-way), both run
    again afterwards, for the tests that follow."""
    yield two_broker_cluster
    cluster = two_broker_cluster.started
    for name in BROKER_NAMES:
        if cluster.running(name):
            cluster.thaw(name)
        else:
            cluster.restart(name)


@pytest.fixture(scope="session", autouse=True)
def early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Early[Any]]]:
    """The early fixtures (``support.EARLY``) of the modules this session runs tests of, started
    before the first test: a module's fixture takes its own from here."""
    selected = {item.module.__name__ for item in request.session.items if isinstance(item, pytest.Function)}
    started = {
        name: Early(prepare(tmp_path_factory.mktemp("early"))) for name, prepare in EARLY.items() if name in selected
    }
    try:
        yield started
    finally:
        for fixture in started.values():
            fixture.close()


@pytest.fixture(scope="session")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker of the release with authentication on (ACL 2.0 on 5.x, plain_acl.yml on 4.9,
    its user ACL_USER), which every test of a run that signs its requests shares: test_acl,
    test_notebook and test_versions each put topics of their own on it."""
    with own_cluster(
        ClusterConfig(
            workdir=tmp_path_factory.mktemp("acl-cluster"),
            brokers=1,
            acl=True,
            namesrv_port=ACL_NAMESRV_PORT,
            broker_ports=(ACL_BROKER_PORT,),
            timer_messages=False,
        )
    ) as handle:
        yield handle.started


_counter = itertools.count()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names that never collide across tests or runs against a reused cluster."""
    run = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        return f"{prefix}-{run}-{next(_counter)}"

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession whose Python workers run this interpreter (so they see the package)."""
    session = local_spark("rocketmq-spark-tests", short_lived=True, **{"spark.driver.memory": "1g"})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A local Spark Connect server whose Python workers run this interpreter, on loopback."""
    with ConnectServer(tmp_path_factory.mktemp("connect-server")) as server:
        yield server


@pytest.fixture(scope="session")
def overhead(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Overhead:
    """Spark alone, once warmed up (the first Python workers' start-up is not in a check)."""
    overhead = Overhead(spark, closed_port(), lambda: tmp_path_factory.mktemp("overhead"))
    stream_s, batch_s = overhead.stream_s(), overhead.batch_s()
    print(f"Spark alone, warming up: a stream fails after {stream_s:.1f} s, a batch read after {batch_s:.1f} s")
    return overhead


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and wheel of the working tree, built once and checked with twine."""
    return build_dist(REPO, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def line_venvs(
    dist: Dist, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LineVenvs]:
    """Virtualenvs of the wheel on each PySpark line (integration/lines.py): when the run has the
    line tests, all of them start building now, in the background; else each on first use."""
    venvs = LineVenvs(dist.wheel, tmp_path_factory.mktemp("lines"))
    if any(item.get_closest_marker("spark_lines") for item in request.session.items):
        venvs.prepare(LINES)
    try:
        yield venvs
    finally:
        venvs.remove()

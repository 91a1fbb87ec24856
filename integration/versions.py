"""The RocketMQ releases the launcher can start, and what differs between them for a launcher.

Each release is resolved from Maven Central (``integration/pom.xml`` with ``-Drocketmq.version``)
into a classpath of its own; its name server, brokers, proxy and mqadmin all run on it. The test
tool on the official Java client is built once and runs against every release (see
``integration/tool/pom.xml``).

Pick a release with ``ClusterConfig.version``, ``python -m integration.cluster start --version``,
or the ``ROCKETMQ_VERSION`` environment variable, which is also the default of both.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

VERSION_ENV = "ROCKETMQ_VERSION"
DEFAULT_VERSION = "5.3.3"
# The first major release with controller mode (a controller electing among a broker name's replicas).
CONTROLLER_MODE_MAJOR = 5


class LogbackStyle(enum.Enum):
    """Where a release's servers find their logging configuration."""

    # 5.x: each module jar carries rmq.<role>.logback.xml; the system property
    # rmq.logback.configurationFile picks one (on a shared classpath the proxy's would win).
    JAR_RESOURCE = "jar-resource"
    # 4.9: NamesrvStartup, BrokerStartup and MQAdminStartup each load
    # $ROCKETMQ_HOME/conf/logback_<role>.xml and fail to start without it; the distribution ships
    # those files, Maven Central does not, so the launcher writes its own.
    HOME_CONF = "home-conf"


class AclStyle(enum.Enum):
    """How a release authenticates signed requests."""

    PLAIN = "plain"  # 4.9: aclEnable=true and $ROCKETMQ_HOME/conf/plain_acl.yml
    ACL2 = "acl2"  # 5.3 and later: authenticationEnabled with users kept by the broker


# RocketMQ reaches into JDK internals (direct buffer cleaning, Netty's native transport, 4.9's
# reflective page-cache checks); JDK 17 denies that unless these packages are opened. The same set
# serves 4.9.7, 5.3.3 and 5.5.x.
JDK17_FLAGS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
)


@dataclass(frozen=True)
class Release:
    """One RocketMQ release as the launcher runs it."""

    version: str
    has_proxy: bool
    logback: LogbackStyle
    acl: AclStyle
    jvm_flags: tuple[str, ...] = JDK17_FLAGS
    # A release Maven Central holds only in part: the release whose other modules (name server,
    # proxy, tools, client) run with this one's, and this one's modules that replace them.
    base: str | None = None
    modules: tuple[str, ...] = ()
    # Whether its brokers can run ACL 2.0's authorization (5.5.1's broker calls its own
    # rocketmq-auth, which Maven Central lacks; 5.5.0's fails with NoSuchMethodError).
    authorizes: bool = True
    # Whether its brokers spin a thread at a full core once they resolved a transactional message
    # (apache/rocketmq#10966, 5.5.0 and 5.5.1): its brokers run with the mitigation
    # docs/running-rocketmq.md gives operators (cluster_config.OP_BATCH_SPIN_MITIGATION).
    spins_after_transactions: bool = False

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    @property
    def has_controller_mode(self) -> bool:
        """Whether it can run controller mode (the failover tests' controller layout)."""
        return self.major >= CONTROLLER_MODE_MAJOR

    @property
    def maven_args(self) -> tuple[str, ...]:
        """What integration/pom.xml needs to resolve this release."""
        no_proxy = () if self.has_proxy else ("-Drocketmq.noProxy",)
        return (f"-Drocketmq.version={self.base or self.version}", *no_proxy)


RELEASES = {
    # The newest 4.x on Maven Central (4.9.8 was released only as a distribution archive).
    "4.9.7": Release("4.9.7", has_proxy=False, logback=LogbackStyle.HOME_CONF, acl=AclStyle.PLAIN),
    # Both honour the broker's listenPort, which two brokers on one host need: snapshots after
    # 5.3.3 set 10911 after reading the config, 5.5.0 sets it before.
    "5.3.3": Release("5.3.3", has_proxy=True, logback=LogbackStyle.JAR_RESOURCE, acl=AclStyle.ACL2),
    "5.5.0": Release(
        "5.5.0", has_proxy=True, logback=LogbackStyle.JAR_RESOURCE, acl=AclStyle.ACL2, spins_after_transactions=True
    ),
    # The newest release, which Maven Central holds only in part: its broker and what the broker
    # is made of are there, its name server, proxy, tools, client and parent pom are not. So its
    # brokers run 5.5.1's own jars on 5.5.0's classpath, beside 5.5.0's name server, proxy and
    # mqadmin (docs/running-rocketmq.md).
    "5.5.1": Release(
        "5.5.1",
        has_proxy=True,
        logback=LogbackStyle.JAR_RESOURCE,
        acl=AclStyle.ACL2,
        base="5.5.0",
        modules=("broker", "store", "tiered-store", "remoting", "common", "controller"),
        authorizes=False,
        spins_after_transactions=True,
    ),
}


class UnknownVersionError(ValueError):
    """A version the launcher has no recipe for."""


def release(version: str) -> Release:
    try:
        return RELEASES[version]
    except KeyError:
        raise UnknownVersionError(
            f"RocketMQ {version} is not one the launcher starts; choose one of {', '.join(RELEASES)}"
        ) from None


def selected_version() -> str:
    """The release ROCKETMQ_VERSION names, or the default; checked, so a typo fails at once."""
    version = os.environ.get(VERSION_ENV, "").strip() or DEFAULT_VERSION
    return release(version).version

"""The options that reading and writing share: where the name servers are, how requests are
signed and encrypted, how long one may take, how long failures are retried, and the namespace.

Their names, defaults and checks live here once, and they become what the layers below take: a
``ClientConfig`` (which also carries the option names its certificate errors tell users to
change) and a ``Retry``. The source, and a sink beside it, add their own options.
"""

from __future__ import annotations

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.config.values import OptionReader
from rocketmq_spark.model import MS_PER_SECOND, ClientConfig, Credentials, SettingNames, parse_name_servers
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.tls import read_trust_bundle

# Option names exactly as documented; matching is case-insensitive.
NAME_SERVER = "nameServer"
PULL_TIMEOUT_MS = "pullTimeoutMs"
ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
SECURITY_TOKEN = "securityToken"
TLS = "tls"
TLS_TRUST_CERT_PATH = "tlsTrustCertPath"
TLS_VERIFY = "tlsVerify"
NAMESPACE = "namespace"
# How long a running query retries; the sink's contract does not list it, so a sink takes it only
# if it needs a budget of its own (it is not in CLUSTER_OPTIONS).
RETRY_BUDGET_MS = "retryBudgetMs"

# The options both contracts list: how to reach and address the cluster.
CLUSTER_OPTIONS = (
    NAME_SERVER,
    PULL_TIMEOUT_MS,
    ACCESS_KEY,
    SECRET_KEY,
    SECURITY_TOKEN,
    TLS,
    TLS_TRUST_CERT_PATH,
    TLS_VERIFY,
    NAMESPACE,
)

DEFAULT_PULL_TIMEOUT_MS = 10_000
DEFAULT_RETRY_BUDGET_MS = 60_000
MAX_PORT = 65535
NAMESPACE_SEPARATOR = "%"

# What a certificate error of a client built from these options tells users to change.
OPTION_NAMES = SettingNames(tls_trust=TLS_TRUST_CERT_PATH, tls_verify=TLS_VERIFY)


def name_servers(reader: OptionReader) -> tuple[str, ...]:
    """The ``nameServer`` list, each entry ``host:port``."""
    servers = parse_name_servers(
        reader.required(
            NAME_SERVER, "Set it to the name server address(es), e.g. 127.0.0.1:9876 or host1:9876;host2:9876"
        )
    )
    for address in servers:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or int(port) > MAX_PORT:
            raise ConfigurationError(NAME_SERVER, f"'{address}' is not host:port", "Write host:port[;host:port...]")
    return servers


def client_config(reader: OptionReader, servers: tuple[str, ...]) -> ClientConfig:
    """How the client reaches the cluster at ``servers``: timeout, credentials and TLS."""
    credentials = _credentials(reader)
    pull_timeout_ms = reader.positive_int(PULL_TIMEOUT_MS, DEFAULT_PULL_TIMEOUT_MS) or DEFAULT_PULL_TIMEOUT_MS
    tls, verify, path = reader.boolean(TLS, False), reader.boolean(TLS_VERIFY, True), reader.get(TLS_TRUST_CERT_PATH)
    pem = _trust_bundle(tls, verify, path)
    return ClientConfig(
        name_servers=servers,
        request_timeout=pull_timeout_ms / MS_PER_SECOND,
        credentials=credentials,
        tls=tls,
        tls_verify=verify,
        tls_trust_pem=pem,
        tls_trust_path=path,
        setting_names=OPTION_NAMES,
    )


def retry_policy(reader: OptionReader) -> Retry:
    """How long a running query retries what a retry can fix (``retryBudgetMs``; 0: never)."""
    budget_ms = reader.positive_int(RETRY_BUDGET_MS, DEFAULT_RETRY_BUDGET_MS, zero_ok=True)
    assert budget_ms is not None
    return Retry(budget_s=budget_ms / MS_PER_SECOND)


def _credentials(reader: OptionReader) -> Credentials | None:
    """The ACL credentials: both keys or neither."""
    access_key, secret_key = reader.get(ACCESS_KEY), reader.get(SECRET_KEY)
    if (access_key is None) != (secret_key is None):
        missing = SECRET_KEY if secret_key is None else ACCESS_KEY
        raise ConfigurationError(
            missing, "is required with the other ACL credential", f"Set both {ACCESS_KEY} and {SECRET_KEY}, or neither"
        )
    if access_key is None or secret_key is None:
        return None
    return Credentials(access_key, secret_key, reader.get(SECURITY_TOKEN))


def _trust_bundle(tls: bool, verify: bool, path: str | None) -> str | None:
    """The PEM text of the CAs to trust (None: the system's), after checking that the TLS options
    agree with each other."""
    # Without tls=true the connections are plain, whatever these ask for: say so, not ignore them.
    for name, given in ((TLS_TRUST_CERT_PATH, path is not None), (TLS_VERIFY, not verify)):
        if given and not tls:
            raise ConfigurationError(name, "applies only to TLS connections", f"Set {TLS}=true, or remove {name}")
    if path is not None and not verify:
        raise ConfigurationError(
            TLS_TRUST_CERT_PATH,
            f"is unused with {TLS_VERIFY}=false, which trusts any certificate",
            f"Remove one of the two ({TLS_VERIFY}=false is for tests only)",
        )
    try:  # read here, on the driver: the text travels with the options, so executors need no file
        return None if path is None else read_trust_bundle(path)
    except ValueError as err:
        raise ConfigurationError(
            TLS_TRUST_CERT_PATH,
            str(err),
            "Give the path, on the Spark driver, of a PEM "
            "file of the CA certificates that sign the servers' certificates",
        ) from err


def with_namespace(resource: str, namespace: str | None) -> str:
    """RocketMQ's ``namespace%resource``, unless the resource already carries the namespace."""
    if not namespace or resource.startswith(namespace + NAMESPACE_SEPARATOR):
        return resource
    return f"{namespace}{NAMESPACE_SEPARATOR}{resource}"


def without_namespace(resource: str, namespace: str | None) -> str:
    """The resource as the user names it: without the namespace prefix."""
    prefix = f"{namespace}{NAMESPACE_SEPARATOR}" if namespace else None
    return resource[len(prefix) :] if prefix and resource.startswith(prefix) else resource

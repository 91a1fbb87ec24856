"""Helpers the tests share (fixtures themselves live in conftest.py)."""

from __future__ import annotations

from typing import Any

from integration.cluster import Cluster, run_tool


class ClusterHandle:
    """What a test needs to know of the cluster, whether this run started it or not."""

    def __init__(self, namesrv_addr: str, proxy_addr: str | None, cluster: Cluster | None) -> None:
        self.namesrv_addr = namesrv_addr
        self.proxy_addr = proxy_addr
        self.cluster = cluster

    def tool(self, command: str, *args: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Run the Java test tool (official RocketMQ client) and return its JSON lines."""
        return run_tool(self.namesrv_addr, command, *args, **kwargs)

    def mqadmin(self, *args: str) -> str:
        if self.cluster is None:
            raise RuntimeError("mqadmin needs a cluster started by this run")
        return self.cluster.mqadmin(*args)

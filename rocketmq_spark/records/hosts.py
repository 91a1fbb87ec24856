"""Hosts of a record (an address and a port, raw) as ``ip:port`` and as the hex that starts an
offset message id. The same few hosts store every message, so renderings are cached."""

from __future__ import annotations

import ipaddress
import struct

from rocketmq_spark.records.layout import IPV4_HOST, PORT_SIZE, size_of

_IPV4_HOST_SIZE = size_of(IPV4_HOST)
_PORT = struct.Struct(">i")
# Born ports vary per producer, so the cache is cleared when it grows past this many hosts.
CACHE_LIMIT = 4096
# Shared with the per-record decoder's loop, which looks hosts up in it directly.
cache: dict[int | bytes, tuple[str, str]] = {}


def _render(host: int | bytes) -> tuple[str, str]:
    raw = host.to_bytes(_IPV4_HOST_SIZE, "big") if isinstance(host, int) else host
    ip_bytes = raw[:-PORT_SIZE]
    (port,) = _PORT.unpack_from(raw, len(ip_bytes))
    if len(raw) == _IPV4_HOST_SIZE:
        text = f"{ipaddress.IPv4Address(ip_bytes)}:{port}"
    else:
        text = f"[{ipaddress.IPv6Address(ip_bytes).compressed}]:{port}"
    return text, raw.hex().upper()


def rendered_host(host: int | bytes) -> tuple[str, str]:
    """``ip:port`` (``[ipv6]:port``) of a raw host, and the uppercase hex of its bytes.

    An IPv4 host comes as the unsigned 64-bit int of its 8 bytes, an IPv6 one as its 20 bytes.
    """
    cached = cache.get(host)
    if cached is None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cached = cache[host] = _render(host)
    return cached

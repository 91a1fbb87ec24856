"""ACL request signing, as RocketMQ's ``AclClientRPCHook`` does it.

The signature is HmacSHA1, keyed with the UTF-8 secret key, over the values of
every ext field except ``Signature`` (keys in Java ``TreeMap`` order, values
concatenated and UTF-8 encoded) followed by the raw body; it is sent base64
encoded. Brokers with plain ACL (4.x) and with ACL 2.0 (5.3.x, where the
AccessKey is the user name and the secret key its password) recompute the same
content, so one function serves both.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from rocketmq_spark.remoting.codec import Body

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
_CHARSET = "utf-8"


def java_string_order(text: str) -> bytes:
    """A sort key giving Java ``String.compareTo`` order.

    Java compares UTF-16 code units; Python compares code points. They differ
    for characters above U+FFFF (surrogates sort below U+E000..U+FFFF), and
    big-endian UTF-16 bytes compare exactly like the code units.
    """
    return text.encode("utf-16-be", "surrogatepass")


def signing_content(fields: Mapping[str, str], body: bytes) -> bytes:
    """The bytes that are signed (``AclUtils.combineRequestContent``)."""
    values = "".join(fields[key] for key in sorted(fields, key=java_string_order) if key != SIGNATURE)
    return values.encode(_CHARSET) + body


def sign(
    ext_fields: Mapping[str, str],
    body: Body,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """A copy of ``ext_fields`` with AccessKey, SecurityToken (when given) and
    the Signature of the request added."""
    signed = dict(ext_fields)
    signed[ACCESS_KEY] = access_key
    if security_token is not None:
        signed[SECURITY_TOKEN] = security_token
    mac = hmac.new(secret_key.encode(_CHARSET), signing_content(signed, b""), hashlib.sha1)
    for part in (body,) if isinstance(body, bytes) else body:  # pieces: signed as joined, without joining
        mac.update(part)
    signed[SIGNATURE] = base64.b64encode(mac.digest()).decode("ascii")
    return signed

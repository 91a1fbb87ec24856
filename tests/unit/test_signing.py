"""ACL signing: Signature = Base64(HmacSHA1(UTF-8 secretKey, values of all ext fields except
Signature, in Java TreeMap key order, UTF-8, followed by the raw body))."""

from __future__ import annotations

import base64
import hashlib
import hmac

from rocketmq_spark.remoting.signing import java_string_order, sign, signing_content

FIELDS = {"topic": "TopicA", "queueId": "0", "consumerGroup": "G"}


def hmac_sha1_base64(secret: bytes, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret, content, hashlib.sha1).digest()).decode()


def test_known_vector() -> None:
    signed = sign(FIELDS, b"", "rocketmq2", "12345678")
    # Keys in order: AccessKey, consumerGroup, queueId, topic (uppercase sorts first).
    content = b"rocketmq2" + b"G" + b"0" + b"TopicA"
    assert signed["Signature"] == hmac_sha1_base64(b"12345678", content)
    assert signed["Signature"] == "Uh65fONG9O1tn5DZGDBY8C6jcmA="
    assert signed == {**FIELDS, "AccessKey": "rocketmq2", "Signature": "Uh65fONG9O1tn5DZGDBY8C6jcmA="}


def test_body_is_appended_after_the_values() -> None:
    signed = sign(FIELDS, b'{"x":1}', "rocketmq2", "12345678")
    assert signed["Signature"] == hmac_sha1_base64(b"12345678", b'rocketmq2G0TopicA{"x":1}')
    assert signed["Signature"] == "9jvxPUxXjHaqDnKaEWtI7vV8w+U="


def test_security_token_is_added_and_signed_in_key_order() -> None:
    signed = sign({"b": "2", "a": "1"}, b"", "ak", "sk", security_token="tok")
    assert signed["SecurityToken"] == "tok"
    # AccessKey < SecurityToken < a < b
    assert signed["Signature"] == hmac_sha1_base64(b"sk", b"ak" + b"tok" + b"1" + b"2")


def test_stale_signature_is_not_signed_and_is_replaced() -> None:
    fresh = sign(FIELDS, b"", "ak", "sk")
    resigned = sign({**FIELDS, "Signature": "stale"}, b"", "ak", "sk")
    assert resigned["Signature"] == fresh["Signature"] != "stale"


def test_input_is_not_modified() -> None:
    fields = dict(FIELDS)
    sign(fields, b"", "ak", "sk", "tok")
    assert fields == FIELDS


def test_unicode_values_and_secret_are_utf8() -> None:
    signed = sign({"topic": "Thé"}, b"", "ak", "sécret")
    assert signed["Signature"] == hmac_sha1_base64("sécret".encode(), "akThé".encode())


def test_keys_sort_by_utf16_code_units_like_java() -> None:
    # Python orders U+FF5E before U+1F600; Java compares UTF-16 units, and the
    # surrogate 0xD83D sorts before 0xFF5E.
    keys = ["\uff5e", "\U0001f600", "a", "B"]
    assert sorted(keys, key=java_string_order) == ["B", "a", "\U0001f600", "\uff5e"]
    assert signing_content({"\uff5e": "2", "\U0001f600": "1"}, b"!") == b"12!"
    # A prefix sorts first, as in String.compareTo.
    assert sorted(["ab", "a"], key=java_string_order) == ["a", "ab"]


def test_a_body_in_pieces_signs_as_the_joined_body() -> None:
    fields = {"b": "topic", "a": "group"}
    pieces = (b"first", memoryview(b"second"), b"")
    assert sign(fields, pieces, "ak", "sk", "token") == sign(fields, b"firstsecond", "ak", "sk", "token")

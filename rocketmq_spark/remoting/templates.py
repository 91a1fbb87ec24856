"""Requests rendered from a template: a header encoded once, with a few integers filled in per
request. A task sends one pull per 32 messages, all alike but for offset and count, and encoding
each one's JSON header afresh was a tenth of its Python time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.codec import _JSON_ENCODER, _SERIALIZE_TYPE_NAMES, _java_string, assemble_frame

# Pull templates a client keeps (one per queue range it reads); past this many it starts again.
PULL_TEMPLATES_KEPT = 4096
_PULL_OPEN_FIELDS = ("queueOffset", "maxMsgNums")


class RequestTemplate:
    """Requests of one code whose header fields are all the same but a few integers, rendered
    once: each request fills in only those and its opaque. A range's pulls differ only in offset
    and count, and the JSON encoder's pass over a dozen fields was a tenth of a task's Python time.

    A frame decodes to the same command as ``encode_frame``'s for the same fields (the open fields
    come last among the extFields); requests with a body or a signature are not made this way.
    """

    __slots__ = ("code", "_format")

    def __init__(self, code: int, fields: Mapping[str, object], open_fields: Sequence[str]) -> None:
        self.code = code
        fixed = {
            key: _java_string(value) for key, value in fields.items() if value is not None and key not in open_fields
        }
        encode = _JSON_ENCODER.encode
        ext = [encode(fixed)[1:-1].replace("%", "%%")] if fixed else []
        ext += [f'{encode(name).replace("%", "%%")}:"%d"' for name in open_fields]
        self._format = (
            f'{{"code":{code},"language":{encode(codes.LANGUAGE_PYTHON)},"version":{codes.PROTOCOL_VERSION},'
            f'"opaque":%d,"flag":0,"extFields":{{{",".join(ext)}}},'
            f'"serializeTypeCurrentRPC":{encode(_SERIALIZE_TYPE_NAMES[codes.SERIALIZE_JSON])}}}'
        )

    def request(self, *values: int) -> TemplatedRequest:
        """The request with the open fields set to ``values``, in the template's order."""
        return TemplatedRequest(self, values)

    def render(self, opaque: int, values: tuple[int, ...]) -> bytes:
        return assemble_frame(codes.SERIALIZE_JSON, (self._format % (opaque, *values)).encode("utf-8"))


class TemplatedRequest:
    """One request of a :class:`RequestTemplate`."""

    __slots__ = ("code", "_template", "_values")

    def __init__(self, template: RequestTemplate, values: tuple[int, ...]) -> None:
        for value in values:
            if type(value) is not int:
                raise TypeError(f"an open header field takes an int, not {value!r}")
        self.code = template.code
        self._template = template
        self._values = values

    def frame(self, opaque: int) -> bytes:
        return self._template.render(opaque, self._values)


class PullTemplates:
    """The pull template of each ``PullSpec`` (queue, group, subscription) a client pulls."""

    def __init__(self) -> None:
        self._templates: dict[calls.PullSpec, RequestTemplate] = {}

    def request(self, spec: calls.PullSpec, offset: int, max_messages: int) -> TemplatedRequest:
        """The pull ``calls.pull_fields`` describes, from the spec's template."""
        template = self._templates.get(spec)
        if template is None:
            if len(self._templates) >= PULL_TEMPLATES_KEPT:
                self._templates.clear()
            fields = calls.pull_fields(spec, 0, 0)
            template = self._templates[spec] = RequestTemplate(
                codes.RequestCode.PULL_MESSAGE, fields, _PULL_OPEN_FIELDS
            )
        return template.request(offset, max_messages)

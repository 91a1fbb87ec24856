"""What a refused request lacked, told so that an operator can grant it at once.

A broker's denial names the user and the resource but not the action (RocketMQ 5.x, ACL 2.0:
"User:u has no permission to access Topic:t from 10.0.0.1, no matched policies."; 4.9's plain
ACL: "No default permission for topic:t"). The action follows from the request: the tables
below are 5.3.3's ``DefaultAuthorizationContextBuilder`` and ``@RocketMQAction`` headers for the
requests this client sends (4.9 checks fewer requests, with its two permissions PUB and SUB).

The grant line asks for every action the client's use needs on that resource, not only the one
refused: ``mqadmin createAcl`` replaces what a user holds on a resource, so a line naming only the
missing action would take away the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

from rocketmq_spark.remoting.codes import RequestCode

TOPIC: Final = "Topic"
GROUP: Final = "Group"
SUB: Final = "Sub"
PUB: Final = "Pub"
GET: Final = "Get"
UPDATE: Final = "Update"

# Per request and resource type, the actions ACL 2.0 accepts (any one of them suffices).
_ACCEPTED: Final[dict[tuple[int, str], tuple[str, ...]]] = {
    (RequestCode.PULL_MESSAGE, TOPIC): (SUB,),
    (RequestCode.PULL_MESSAGE, GROUP): (SUB,),
    (RequestCode.QUERY_CONSUMER_OFFSET, TOPIC): (SUB, GET),
    (RequestCode.QUERY_CONSUMER_OFFSET, GROUP): (SUB, GET),
    (RequestCode.UPDATE_CONSUMER_OFFSET, TOPIC): (SUB, UPDATE),
    (RequestCode.UPDATE_CONSUMER_OFFSET, GROUP): (SUB, UPDATE),
    (RequestCode.GET_MAX_OFFSET, TOPIC): (GET,),
    (RequestCode.GET_MIN_OFFSET, TOPIC): (GET,),
    (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, TOPIC): (GET,),
    (RequestCode.GET_EARLIEST_MSG_STORETIME, TOPIC): (GET,),
    (RequestCode.GET_TOPIC_STATS_INFO, TOPIC): (GET,),
    (RequestCode.GET_CONSUME_STATS, TOPIC): (GET,),
    (RequestCode.GET_CONSUME_STATS, GROUP): (GET,),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, GROUP): (SUB, GET),
    (RequestCode.HEART_BEAT, TOPIC): (SUB,),
    (RequestCode.HEART_BEAT, GROUP): (SUB,),
    (RequestCode.UNREGISTER_CLIENT, GROUP): (SUB,),
    (RequestCode.LOCK_BATCH_MQ, TOPIC): (SUB,),
    (RequestCode.LOCK_BATCH_MQ, GROUP): (SUB,),
    (RequestCode.UNLOCK_BATCH_MQ, TOPIC): (SUB,),
    (RequestCode.UNLOCK_BATCH_MQ, GROUP): (SUB,),
    (RequestCode.SEND_MESSAGE, TOPIC): (PUB,),
    (RequestCode.SEND_MESSAGE_V2, TOPIC): (PUB,),
    (RequestCode.SEND_BATCH_MESSAGE, TOPIC): (PUB,),
    (RequestCode.END_TRANSACTION, TOPIC): (PUB,),
    # A 5.x proxy checks routes too (the name server does not): any of these on the topic.
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, TOPIC): (PUB, SUB, GET),
}
_WRITES: Final = frozenset(
    {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.END_TRANSACTION}
)
# What a use needs on one resource at least: a reader pulls its topic and pulls with and commits
# to its group (Sub; the offsets Get would give come from pulls too); a writer sends (Pub). The
# grant line adds the refused request's own action (a search by time needs Get).
_READER_NEEDS: Final[dict[str, tuple[str, ...]]] = {TOPIC: (SUB,), GROUP: (SUB,)}
_WRITER_NEEDS: Final[dict[str, tuple[str, ...]]] = {TOPIC: (PUB,), GROUP: (SUB,)}
# A refused route says nothing of the use, which readers and writers share: the grant line for
# each use, reading (Sub) or writing (Pub).
_ROUTE_USES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (("read", (SUB,)), ("write", (PUB,)))

_ACL2_DENIAL: Final = re.compile(
    r"(?P<subject>\S+) has no permission to access (?P<type>[A-Za-z]+):(?P<name>\S+) from \S+?, (?P<why>.*)"
)
_PLAIN_DENIAL: Final = re.compile(r"No default permission for (?P<type>topic|group):(?P<name>\S+)")
_PLAIN_PERMISSION: Final[dict[str, str]] = {SUB: "SUB", PUB: "PUB", GET: "SUB", UPDATE: "SUB"}


@dataclass(frozen=True)
class Denial:
    """A resource the broker refused this user, and what the refused request needed there."""

    resource_type: str
    name: str
    needed: tuple[str, ...]  # the actions the refused request accepts, any one of them
    grant_actions: tuple[str, ...]
    plain_acl: bool
    # Where the request names no use (a route): per use, the actions to grant instead.
    uses: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def resource(self) -> str:
        return f"{self.resource_type}:{self.name}"

    def advice(self) -> str:
        """The sentence an error ends with: what is missing, and the line that grants it."""
        needed = " or ".join(self.needed) if self.needed else "access"
        if self.plain_acl:
            perms = "|".join(dict.fromkeys(_PLAIN_PERMISSION[a] for a in self.grant_actions))
            key = "topicPerms" if self.resource_type == TOPIC else "groupPerms"
            return (
                f"The accessKey's account needs {needed} on {self.resource}: add '{self.name}={perms}' to its "
                f"{key} in plain_acl.yml (see docs/security.md)"
            )
        if self.uses:
            lines = ", or ".join(f"{self._grant_line(actions)} to {use} it" for use, actions in self.uses)
        else:
            lines = self._grant_line(self.grant_actions)
        return (
            f"The user needs {needed} on {self.resource}; grant it with: {lines} "
            f"(this replaces the user's actions on {self.resource}: keep in -a any other it needs; "
            "docs/security.md lists them per use)"
        )

    def widened(self, actions: tuple[str, ...]) -> Denial:
        """This denial for a use that needs ``actions`` on the resource (more than a plain
        reader's or writer's): its grant line asks for them all."""
        return replace(self, grant_actions=tuple(dict.fromkeys(actions + self.grant_actions)), uses=())

    def _grant_line(self, actions: tuple[str, ...]) -> str:
        return (
            "mqadmin createAcl -n <nameServer> -c <cluster> -s User:<accessKey> "
            f"-r {self.resource} -a {','.join(actions)} -d Allow"
        )


def denial(request_code: int | None, remark: str | None) -> Denial | None:
    """What a refusal's remark says was denied, or None where it names no resource (a bad
    signature, an unknown user)."""
    if not remark:
        return None
    found = _ACL2_DENIAL.search(remark)
    plain = False
    if found is None:
        found = _PLAIN_DENIAL.search(remark)
        plain = True
    if found is None:
        return None
    resource_type = found["type"].capitalize()
    needed = _ACCEPTED.get((request_code, resource_type), ()) if request_code is not None else ()
    needs = _WRITER_NEEDS if request_code in _WRITES else _READER_NEEDS
    grant = tuple(dict.fromkeys(needs.get(resource_type, ()) + needed[:1]))
    uses = _ROUTE_USES if request_code == RequestCode.GET_ROUTEINFO_BY_TOPIC and resource_type == TOPIC else ()
    return Denial(resource_type, found["name"].rstrip(".,"), needed, grant, plain, uses)

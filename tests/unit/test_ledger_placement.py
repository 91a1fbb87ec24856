"""Where an exactly-once group's records go (``sink/ledger.py``): the group's order of the brokers
keeps each broker's place as others come and go, and where a later reader of each broker starts."""

from __future__ import annotations

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.sink.decision_record import Decision, record_key
from rocketmq_spark.sink.ledger import COPIES, Entries, ranked

BROKERS = [f"broker-{i}" for i in range(6)]
GROUPS = [f"orders-eo-{i}" for i in range(200)]


def test_each_group_has_its_own_order_and_it_does_not_depend_on_the_order_given() -> None:
    firsts = {ranked(group, BROKERS)[0] for group in GROUPS}
    assert firsts == set(BROKERS), "groups' first brokers spread over all brokers"
    for group in GROUPS[:20]:
        assert ranked(group, BROKERS) == ranked(group, list(reversed(BROKERS)))


def test_a_broker_added_or_lost_moves_no_other_broker() -> None:
    for group in GROUPS:
        order = ranked(group, BROKERS[:5])
        grown = ranked(group, BROKERS)
        assert [b for b in grown if b != BROKERS[5]] == order
        for lost in BROKERS[:5]:
            assert ranked(group, [b for b in BROKERS[:5] if b != lost]) == [b for b in order if b != lost]


def test_a_record_kept_on_the_first_brokers_survives_any_one_of_them_lost() -> None:
    """A reader reads every broker of the route: with ``COPIES`` >= 2, losing any single broker
    still leaves one that holds every record."""
    assert COPIES >= 2
    for group in GROUPS:
        holders = set(ranked(group, BROKERS)[:COPIES])
        assert all(holders - {lost} for lost in BROKERS)


def decision(batch: int) -> Decision:
    return Decision("g", "q", batch, (), {MessageQueue("t", "broker-0", 0): 0})


def test_each_broker_is_settled_at_its_own_oldest_pending_decision() -> None:
    first, second = record_key("g", "q", 1), record_key("g", "q", 2)
    entries = Entries(
        decisions={first: decision(1), second: decision(2)},
        done={first},
        ends={"broker-0": 50, "broker-1": 9, "broker-2": 4},
        first={"broker-0": {first: 40, second: 44}, "broker-1": {first: 7}, "broker-2": {}},
    )
    assert entries.keep_from("broker-0") == 44, "the pending batch's record"
    assert entries.keep_from("broker-1") == 7, "no pending decision there: the last batch's records"
    assert entries.keep_from("broker-2") == 4, "none of the group's records: the end"
    assert entries.keep_from("broker-9") == 0, "a broker not read"
    entries.done.add(second)
    assert entries.keep_from("broker-0") == 44, "the last batch's records stay readable for a replayed commit"

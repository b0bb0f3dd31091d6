"""Restore planning and consumer group translation (pure parts)."""

from __future__ import annotations

import pytest

from processor.errors import ConfigError
from processor.restore.group_offsets import check_one_to_one, parse_offsets_csv, translate
from processor.restore.offset_map import OffsetMap, OffsetRun
from processor.restore.plan import (
    ArchivedRange,
    RangeBound,
    range_from,
    range_to,
    resolve_start,
    resolve_stop,
    target_partition_for,
)

ARCHIVED = ArchivedRange(100, 999)


def test_range_bounds() -> None:
    assert range_from(None, None) == RangeBound("start")
    assert range_to(None, None).text() == "end"
    assert range_from(5, None).text() == "offset:5"
    assert range_to(None, 1700).text() == "time:1700"
    with pytest.raises(ConfigError):
        range_from(1, 2)
    with pytest.raises(ConfigError):
        range_to(-1, None)


def test_resolving_against_the_archive() -> None:
    assert resolve_start(RangeBound("start"), ARCHIVED, None) == 100
    assert resolve_start(RangeBound("offset", 500), ARCHIVED, None) == 500
    with pytest.raises(ConfigError, match="starts at offset 100"):
        resolve_start(RangeBound("offset", 50), ARCHIVED, None)
    assert resolve_start(RangeBound("time", 1), ARCHIVED, 321) == 321
    assert resolve_start(RangeBound("time", 1), ARCHIVED, None) == 1000  # nothing at or after: empty
    assert resolve_stop(RangeBound("end"), ARCHIVED, None) == 1000
    assert resolve_stop(RangeBound("offset", 5000), ARCHIVED, None) == 1000
    assert resolve_stop(RangeBound("offset", 600), ARCHIVED, None) == 600
    assert resolve_stop(RangeBound("time", 1), ARCHIVED, 700) == 700


def test_partitioners() -> None:
    assert target_partition_for(3, 8, "same") == 3
    with pytest.raises(ConfigError, match="--partitioner modulo"):
        target_partition_for(3, 2, "same")
    assert target_partition_for(3, 2, "modulo") == 1
    with pytest.raises(ConfigError):
        target_partition_for(0, 2, "hash")


MAPS = {
    0: OffsetMap(0, 0, 0, 20, (OffsetRun(0, 50, 10), OffsetRun(11, 61, 9))),
    1: OffsetMap(1, 1, 5, 5),
}


def test_group_translation() -> None:
    got = translate("g", {0: 11, 1: 5, 2: 3}, MAPS)
    assert [(t.source_partition, t.target_partition, t.target_offset) for t in got] == [
        (0, 0, 61),
        (1, 1, None),
        (2, None, None),
    ]
    assert got[0].problem is None
    assert got[1].problem is not None and "no record" in got[1].problem
    assert got[2].problem == "source partition 2 was not restored"
    past = translate("g", {0: 21}, MAPS)[0]
    assert past.target_offset is None and past.problem is not None and "outside" in past.problem


def test_groups_move_only_one_to_one() -> None:
    check_one_to_one(MAPS)
    with pytest.raises(ConfigError, match="cannot be moved"):
        check_one_to_one({0: OffsetMap(0, 0, 0, 0), 2: OffsetMap(2, 0, 0, 0)})


def test_offsets_csv() -> None:
    one = "orders,0,17\norders,1,4\nother,0,9\n\n"
    assert parse_offsets_csv(one, "orders", ["g"]) == {"g": {0: 17, 1: 4}}
    several = "g1,orders,0,1\ng2,orders,0,2\ng3,orders,0,3\n"
    assert parse_offsets_csv(several, "orders", ["g1", "g2"]) == {"g1": {0: 1}, "g2": {0: 2}}
    with pytest.raises(ConfigError, match="exactly one --group"):
        parse_offsets_csv(one, "orders", ["a", "b"])
    with pytest.raises(ConfigError, match="line 1"):
        parse_offsets_csv("orders,x,1\n", "orders", ["g"])
    with pytest.raises(ConfigError, match="line 2"):
        parse_offsets_csv("orders,0,1\na,b\n", "orders", ["g"])

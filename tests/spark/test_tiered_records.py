"""``tiered_records`` against the real archive: byte-exact, ranges, pushdown, streaming, tail=live."""

from __future__ import annotations

import pytest

from tests.spark.conftest import PARTITIONS, TOPIC, as_tuple, collect_offsets, consume_all, spark_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def read(spark, archive, **extra):
    return spark.read.format("tiered_records").options(**spark_options(archive, **extra)).load()


def test_batch_returns_every_archived_record_byte_exact(spark, archive) -> None:
    ends = archive.archive_ends()
    plain = consume_all(archive.info.bootstrap_servers)
    rows = read(spark, archive).collect()
    assert collect_offsets(rows) == [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]
    assert all(r["topic"] == TOPIC for r in rows)
    for r in rows:
        assert as_tuple(r) == plain[(r["partition"], r["offset"])], (r["partition"], r["offset"])
    shapes = [as_tuple(r) for r in rows]
    assert any(s[0] is None for s in shapes) and any(s[0] == b"" for s in shapes)
    assert any(s[1] is None for s in shapes) and any(s[1] == b"" for s in shapes)
    assert any(len(s[1] or b"") == 300 * 1024 for s in shapes)
    assert any([n for n, _ in s[2]].count("dup") == 2 and ("null", None) in s[2] and ("empty", b"") in s[2] for s in shapes)
    assert any(s[2] == [] for s in shapes)

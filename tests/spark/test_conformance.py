"""Conformance: the same query through the reference reader (Spark's Kafka source semantics on the
live topic, ``kafka_reference``) and through ``tiered_records`` on the archive must give the same
rows, or both an error. With ``tail=live`` the whole answer must match (the archive, the topic past
it); without, queries bounded inside the archive must.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.spark.conftest import BASE_TS, PARTITIONS, TOPIC
from tests.spark.kafka_reference import KafkaReference, ReferenceError

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def spark_rows(spark: Any, options: dict[str, str]) -> list[tuple[Any, ...]]:
    rows = spark.read.format("tiered_records").options(**options).load().collect()
    out = []
    for r in rows:
        d = r.asDict()
        base: tuple[Any, ...] = (
            None if d["key"] is None else bytes(d["key"]),
            None if d["value"] is None else bytes(d["value"]),
            d["topic"],
            d["partition"],
            d["offset"],
            round(d["timestamp"].timestamp() * 1000),
            d["timestampType"],
        )
        if "headers" in d:
            headers = d["headers"]
            pairs = None if headers is None else [(h["key"], h["value"]) for h in headers]
            base = (
                *base,
                None if pairs is None else tuple((k, None if v is None else bytes(v)) for k, v in pairs),
            )
        out.append(base)
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def both(spark: Any, archive: Any, query: dict[str, str], **tiered_only: str) -> tuple[Any, Any]:
    """(reference rows or its error, tiered_records rows or its error)."""
    reference = KafkaReference(archive.info.bootstrap_servers)
    try:
        expected: Any = reference.batch({"subscribe": TOPIC, **query} if not _strategy(query) else query)
    except ReferenceError as exc:
        expected = exc
    options = {
        **archive.options,
        **({"subscribe": TOPIC} if not _strategy(query) else {}),
        **query,
        **tiered_only,
    }
    try:
        got: Any = spark_rows(spark, options)
    except Exception as exc:  # an AnalysisException / Py4J error carrying the source's message
        got = exc
    return expected, got


def _strategy(query: dict[str, str]) -> bool:
    return any(k in query for k in ("assign", "subscribePattern", "subscribe"))


def p(offsets: dict[int, int]) -> str:
    return json.dumps({TOPIC: {str(k): v for k, v in offsets.items()}})


TAIL_CASES = {
    "earliest to latest": {},
    "headers": {"includeHeaders": "true"},
    "json offsets with -2 and -1": {
        "startingOffsets": p({0: 10, 1: -2}),
        "endingOffsets": p({0: -1, 1: 250}),
    },
    "global timestamps": {"startingTimestamp": str(BASE_TS + 1005), "endingTimestamp": str(BASE_TS + 2000)},
    "timestamps per partition, an end nothing reaches is latest": {
        "startingOffsetsByTimestamp": p({0: BASE_TS + 100, 1: BASE_TS + 3000}),
        "endingOffsetsByTimestamp": p({0: BASE_TS + 4000, 1: BASE_TS + 10**12}),
    },
    "a start no record reaches, strategy latest": {
        "startingTimestamp": str(BASE_TS + 10**12),
        "startingOffsetsByTimestampStrategy": "latest",
    },
    "subscribePattern": {"subscribePattern": "spark-rec.*", "includeHeaders": "true"},
    "subscribePattern must match the whole name": {"subscribePattern": "spark-rec"},
    "assign": {"assign": json.dumps({TOPIC: [1]})},
    "minPartitions": {"minPartitions": "7"},
    "maxRecordsPerPartition": {"maxRecordsPerPartition": "50", "minPartitions": "3"},
    "groupIdPrefix": {"groupIdPrefix": "conformance"},
    "failOnDataLoss false": {"failOnDataLoss": "false"},
}
ERROR_CASES = {
    "a start no record reaches": ({"startingTimestamp": str(BASE_TS + 10**12)}, "No offset matched"),
    "json naming one partition of two": ({"startingOffsets": p({0: 5})}, "must specify all TopicPartitions"),
    "latest as a batch start": ({"startingOffsets": "latest"}, "can't be latest for batch"),
    "-1 in a batch start": ({"startingOffsets": p({0: -1, 1: 0})}, "can't be latest for batch"),
    "earliest as a batch end": ({"endingOffsets": "earliest"}, "can't be earliest for batch"),
    "timestamps naming one partition": ({"startingOffsetsByTimestamp": p({1: BASE_TS})}, "must specify all"),
}


@pytest.mark.parametrize("case", sorted(TAIL_CASES))
def test_tail_live_batch_matches_the_reference_reader(spark, archive, case) -> None:
    expected, got = both(spark, archive, TAIL_CASES[case], tail="live")
    assert not isinstance(expected, Exception), expected
    assert not isinstance(got, Exception), got
    assert got == expected
    if case == "headers":
        assert any(r[7] is None for r in got) and any(r[7] for r in got)
        assert all(len(r) == 8 for r in got)
    elif case == "earliest to latest":
        assert all(len(r) == 7 for r in got)  # no headers column unless asked, as Spark
        ends = archive.archive_ends()
        assert any(r[4] >= ends[r[3]] for r in got)  # the answer crossed into the live topic


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_queries_spark_refuses_are_refused_by_both(spark, archive, case) -> None:
    query, message = ERROR_CASES[case]
    expected, got = both(spark, archive, query, tail="live")
    assert isinstance(expected, ReferenceError), expected
    assert isinstance(got, Exception) and message in str(got), got


def test_archive_only_queries_inside_the_archive_match_the_reference(spark, archive) -> None:
    ends = archive.archive_ends()
    bounded = {"endingOffsets": p(ends)}
    for query in (
        {},
        {"startingOffsets": p({0: 10, 1: -2}), "endingOffsets": p({0: ends[0] - 3, 1: ends[1]})},
        {"startingTimestamp": str(BASE_TS + 1005), "endingTimestamp": str(BASE_TS + 2000)},
        {"assign": json.dumps({TOPIC: [0]}), "endingOffsets": json.dumps({TOPIC: {"0": ends[0]}})},
    ):
        bounded_by_query = "endingOffsets" in query or "endingTimestamp" in query
        expected, _ = both(spark, archive, query if bounded_by_query else {**bounded, **query})
        _, got = both(spark, archive, query)
        assert not isinstance(got, Exception), got
        assert got == expected, query
    # asking past the archive's end without tail=live is an error, never fewer rows
    _, got = both(spark, archive, {"endingOffsets": p({0: ends[0] + 5, 1: ends[1]})})
    assert isinstance(got, Exception) and "set tail=live" in str(got)


def test_option_mistakes_are_errors_not_other_rows(spark, archive) -> None:
    for query, message in (
        ({"startingOffset": "earliest"}, "does not know the option(s) startingoffset"),
        ({"kafka.isolation.level": "read_uncommitted"}, "read_committed consumer sees"),
        ({"kafka.auto.offset.reset": "latest"}, "Kafka option 'auto.offset.reset' is not supported"),
    ):
        _, got = both(spark, archive, query)
        assert isinstance(got, Exception) and message in str(got), (query, got)


def test_min_partitions_and_max_records_shape_the_tasks(spark, archive) -> None:
    options = {**archive.options, "subscribe": TOPIC, "tail": "live"}
    plain = spark.read.format("tiered_records").options(**options).load().rdd.getNumPartitions()
    more = spark.read.format("tiered_records").options(**options, minPartitions=str(plain * 3)).load()
    assert more.rdd.getNumPartitions() >= plain * 3 - PARTITIONS
    capped = spark.read.format("tiered_records").options(**options, maxRecordsPerPartition="40").load()
    sizes = capped.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert max(sizes) <= 40 and sum(sizes) == capped.count()

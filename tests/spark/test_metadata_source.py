"""``remote_log_metadata``: a row per message of the metadata topic, garbage as rows, its bytes kept."""

from __future__ import annotations

import pytest

from processor.kafka.clients import new_producer
from processor.metadata.codec import encode_value
from tests.spark.planted import plant

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_a_row_per_message_and_garbage_as_rows(spark, local_stack) -> None:
    arch = plant(local_stack, "spark-metadata-rows")
    try:
        arch.produce(0, 20)
        first = arch.copy(0, 0, 20)
        producer = new_producer(local_stack.bootstrap_servers, "t")
        producer.produce(
            arch.meta, value=b"\x01\x07not avro", key=f"{arch.topic}/0/garbage".encode(), partition=0
        )
        assert producer.flush(10) == 0
        options = {"kafka.bootstrap.servers": local_stack.bootstrap_servers, "metadata.topic": arch.meta}
        rows = spark.read.format("remote_log_metadata").options(**options).load().collect()
        positions = [(r["meta_partition"], r["meta_offset"]) for r in rows]
        assert len(positions) == len(set(positions)) == 3  # STARTED, FINISHED, garbage
        garbage = [r for r in rows if r["decode_error"] is not None]
        assert (
            len(garbage) == 1
            and garbage[0]["topic"] == arch.topic
            and bytes(garbage[0]["value"]) == b"\x01\x07not avro"
        )
        mine = next(r for r in rows if r["state"] == "COPY_SEGMENT_FINISHED")
        assert (mine["segment_id"], mine["start_offset"], mine["end_offset"]) == (
            str(first.segment_id.id),
            0,
            19,
        )
        assert bytes(mine["value"]) == encode_value(first) and mine["record_count"] == 20
        assert [(e["epoch"], e["start_offset"]) for e in mine["leader_epochs"]] == list(
            first.segment_leader_epochs
        )
        with pytest.raises(Exception, match="remote_log_metadata does not know the option"):
            spark.read.format("remote_log_metadata").options(
                **options, startingOffset="earliest"
            ).load().collect()
    finally:
        arch.close()

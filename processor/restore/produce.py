"""The restore's hot loop: a chunk of archived batches into librdkafka, with delivery reports only
for the first and last record of each batch (:mod:`processor.restore.delivery`)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from processor.restore.archive import Chunk
from processor.restore.delivery import Span
from processor.segment.entries_v2 import batch_record_views
from processor.segment.records import KafkaRecord


class _ListHeaders:
    """A format 1 record with its headers as the list confluent-kafka takes."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(self, record: KafkaRecord) -> None:
        self.offset, self.key, self.value = record.offset, record.key, record.value
        self.timestamp, self.headers = record.timestamp, list(record.headers)


def produce_chunk(
    producer: Producer, topic: str, partition: int, source_partition: int, chunk: Chunk, spans: list[Span]
) -> int:
    """Produce the chunk's records in range, straight from the archived batches (decoded once,
    by aiokafka's C reader), each batch's records as one span; returns how many. Only the first and last
    record of each batch get a delivery report (delivery.py). The hot loop: ``produce`` takes
    its arguments by position (topic, value, key, partition, callback, on_delivery, timestamp,
    headers), measurably cheaper than by keyword; a report callback goes in the ``callback``
    slot (confluent-kafka ignores ``on_delivery`` when ``callback`` is given as None)."""
    produce = producer.produce
    poll = producer.poll
    low, high = chunk.low, chunk.high
    produced = 0

    def send(r: Any, report: Any) -> None:
        while True:
            try:
                produce(topic, r.value, r.key, partition, report, None, r.timestamp, r.headers or None)
                return
            except BufferError:  # librdkafka's queue is full: serve delivery reports, retry
                poll(0.05)

    groups: list[tuple[list[Any], range | None]] = []
    for batch in chunk.batches:
        records = batch_record_views(batch)  # checked by the archive reader; headers as lists
        base = int.from_bytes(batch[:8], "big")
        end = base + int.from_bytes(batch[23:27], "big")
        if low <= base and end < high:
            groups.append((records, range(base, end + 1) if len(records) == end - base + 1 else None))
        else:
            records = [r for r in records if low <= r.offset < high]
            if records:
                groups.append((records, None))
    if chunk.records:  # from format 1 blocks: decoded and in range already; headers as lists
        groups.append(([_ListHeaders(r) for r in chunk.records], None))
    for records, contiguous in groups:
        span = Span(source_partition, contiguous if contiguous is not None else [r.offset for r in records])
        spans.append(span)
        produced += span.count
        if len(records) == 1:
            send(records[0], span.on_only)
        else:
            send(records[0], span.on_first)
            middle = iter(records[1:-1])
            r = None
            while True:  # the try costs nothing until librdkafka's queue is full (BufferError)
                try:
                    if r is not None:  # the record refused when the queue was full
                        produce(topic, r.value, r.key, partition, None, None, r.timestamp, r.headers or None)
                    for r in middle:
                        produce(topic, r.value, r.key, partition, None, None, r.timestamp, r.headers or None)
                    break
                except BufferError:  # serve delivery reports, then retry the refused record
                    poll(0.05)
            send(records[-1], span.on_last)
    poll(0)
    return produced

"""Deterministic sample records of every shape a Kafka record can take (demo and tests).

``sample_record(i)`` always returns the same record, so a reader can check what was produced
without keeping it: null and empty keys and values, binary values up to 1 MiB, headers with
duplicate names and null values, explicit CreateTime timestamps.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from processor.kafka.client_types import Producer
from processor.kafka.clients import KafkaTarget, new_producer

BASE_TS = 1_700_000_000_000
MiB = 1024 * 1024
# The largest value in the samples: as large as a record batch that Apache Kafka accepts by default
# allows (max.message.bytes 1 MiB + 12 bytes, the batch's and record's own bytes included).
BIG_VALUE = MiB - 1024


@dataclass(frozen=True, slots=True)
class SampleRecord:
    index: int
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def _bytes(i: int, n: int) -> bytes:
    seed = hashlib.sha256(i.to_bytes(8, "big")).digest()
    return (seed * (n // len(seed) + 1))[:n]


def sample_record(i: int, partitions: int, big_every: int = 5000) -> SampleRecord:
    shape = i % 10
    key: bytes | None = f"key-{i % 97}".encode()
    if shape == 1:
        key = None
    elif shape == 2:
        key = b""
    value: bytes | None = _bytes(i, 64 + (i * 37) % 1500)
    if shape == 3:
        value = None
    elif shape == 4:
        value = b""
    elif big_every and i % big_every == big_every - 1:
        value = _bytes(i, BIG_VALUE)
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if shape == 5:
        headers = (("trace", _bytes(i, 16)), ("trace", b"second"), ("empty", b""), ("null", None))
    elif shape == 6:
        headers = (("h", b"\x00\xff"),)
    return SampleRecord(i, i % partitions, key, value, headers, BASE_TS + i * 10 + (i % 7) * 3)


def produce_samples(
    kafka: KafkaTarget,
    topic: str,
    count: int,
    partitions: int,
    start: int = 0,
    big_every: int = 5000,
    producer_config: dict[str, Any] | None = None,
) -> list[SampleRecord]:
    """Produce ``count`` sample records; ``producer_config`` overrides librdkafka settings
    (``compression.type``, ``batch.size``: what the producer's record batches look like)."""
    producer: Producer = new_producer(
        kafka,
        "processor-sample-producer",
        **{
            "enable.idempotence": True,
            "message.max.bytes": 2 * MiB + 4096,
            "linger.ms": 5,
            "batch.size": MiB,
            **(producer_config or {}),
        },
    )
    out: list[SampleRecord] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}-{msg.partition()}: {err}")

    for i in range(start, start + count):
        rec = sample_record(i, partitions, big_every)
        while True:
            try:
                producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=rec.partition,
                    headers=list(rec.headers) or None,
                    timestamp=rec.timestamp,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
        out.append(rec)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failed:
        reasons = "; ".join(sorted(set(failed))[:5])
        raise RuntimeError(f"{remaining + len(failed)} sample records were not delivered: {reasons}")
    time.sleep(0.2)  # Tansu's high watermark can lag a moment behind a flush
    return out

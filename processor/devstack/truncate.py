"""Make a local stack's broker delete a topic's records now, as its retention would: DeleteRecords up
to each partition's end (``processor dev truncate``). Apache Kafka only: Tansu answers DeleteRecords
by closing the connection (its storage engine does not implement it)."""

from __future__ import annotations

from processor.errors import ConfigError
from processor.kafka.admin import partition_counts
from processor.kafka.client_types import Consumer, KafkaException, KafkaTP
from processor.kafka.clients import KafkaTarget, base_config, new_admin

TIMEOUT_S = 30.0
CLIENT_ID = "processor-dev-truncate"


def truncate_topic(kafka: KafkaTarget, topic: str) -> dict[int, tuple[int, int]]:
    """Delete every record of ``topic`` the broker holds; returns each partition's (log start before,
    log start after)."""
    admin = new_admin(kafka, CLIENT_ID)
    count = partition_counts(admin, [topic]).get(topic)
    if not count:
        raise ConfigError(f"--topic {topic}: no such topic on the stack's broker")
    consumer = Consumer(
        {**base_config(kafka, "processor-dev-truncate"), "group.id": "processor-dev-truncate"}
    )
    try:
        marks = {
            p: consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=TIMEOUT_S) for p in range(count)
        }
    finally:
        consumer.close()
    wanted = [KafkaTP(topic, p, high) for p, (_, high) in marks.items() if high > 0]
    for future in admin.delete_records(wanted).values() if wanted else ():
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise ConfigError(f"the broker refused to delete the records of {topic}: {exc}") from exc
    return {p: (low, high) for p, (low, high) in marks.items()}

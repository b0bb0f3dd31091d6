"""JSON shapes of the read API (CLI ``--json`` and HTTP): bytes as base64, null kept distinct from empty."""

from __future__ import annotations

import base64
from typing import Any

from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.records import KafkaRecord


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def record_to_json(record: KafkaRecord) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": record.timestamp_type.name,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
    }


def segment_to_json(segment: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {
        "id": str(segment.segment_id.id),
        "topic": segment.segment_id.topic,
        "partition": segment.segment_id.partition,
        "start_offset": segment.start_offset,
        "end_offset": segment.end_offset,
        "state": segment.state.value,
        "size_bytes": segment.segment_size_in_bytes,
        "record_count": segment.record_count,
        "max_timestamp_ms": segment.max_timestamp_ms,
        "writer": segment.writer_id,
        "writer_epoch": segment.writer_epoch,
        "topic_id": segment.segment_id.topic_id,
        "object_key": segment.data_object_key,
        "index_key": segment.index_object_key,
    }

"""JSON shapes of the read API (CLI ``--json`` and HTTP): bytes as base64, null kept distinct from empty."""

from __future__ import annotations

import base64
import json.encoder
from collections.abc import Sequence
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


# The keys of segment_to_json in its order: a listing row (processor.follower.listing_rows.Row) holds
# their values in the same order.
SEGMENT_JSON_FIELDS = (
    "id", "topic", "partition", "start_offset", "end_offset", "state", "size_bytes", "record_count",
    "max_timestamp_ms", "writer", "writer_epoch", "topic_id", "object_key", "index_key",
)  # fmt: skip
_JSON_LINE = "{" + ", ".join(f'"{name}": %s' for name in SEGMENT_JSON_FIELDS) + "}\n"


def segment_rows_json(rows: Sequence[Sequence[Any]]) -> str:
    """One JSON object a line for each listing row: byte for byte what ``json.JSONEncoder().encode``
    writes for ``segment_to_json`` of the row's segment (its separators, its ASCII escaping through
    the same C function, ``null`` for a missing topic id, integers as ``repr``), without a dict and
    an encoder's walk a row (a third of a listing's time before)."""
    string = json.encoder.encode_basestring_ascii
    line = _JSON_LINE
    return "".join(
        [
            line
            % (
                string(sid), string(topic), partition, start, end, string(state), size, count, max_ts,
                string(writer), epoch, "null" if topic_id is None else string(topic_id), string(data),
                string(index),
            )
            for (
                sid, topic, partition, start, end, state, size, count, max_ts, writer, epoch, topic_id, data,
                index,
            ) in rows
        ]
    )  # fmt: skip

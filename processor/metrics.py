"""Prometheus metrics of the worker (served at /metrics by the worker's web server)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS_TAKEN = Counter("processor_records_taken_total", "Records encoded into open segments")
RECORDS_COPIED = Counter("processor_records_offloaded_total", "Records in segments copied to remote storage")
BYTES_COPIED = Counter("processor_bytes_offloaded_total", "Data object bytes copied to remote storage")
SEGMENTS_COPIED = Counter("processor_segments_copied_total", "Segments that reached COPY_SEGMENT_FINISHED")
SEGMENTS_ROLLED = Counter("processor_segments_rolled_total", "Segments sealed, by reason", ["reason"])
COPY_FAILURES = Counter("processor_copy_failures_total", "Failed segment copy attempts (each is retried)")
COPY_SECONDS = Histogram(
    "processor_copy_seconds",
    "Time to copy one segment",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
BUFFER_BYTES = Gauge("processor_offload_buffer_bytes", "Bytes held by the offload buffer")
BUFFER_BOUND = Gauge(
    "processor_offload_buffer_bound_bytes", "The offload buffer's bound (PROCESSOR_BUFFER_BYTES)"
)
CONSUMPTION_PAUSED = Gauge("processor_consumption_paused", "1 while consumption is paused by a full buffer")
REMOTE_END_OFFSET = Gauge(
    "processor_remote_end_offset",
    "Highest offset in a COPY_SEGMENT_FINISHED segment (-1: none)",
    ["topic", "partition"],
)
OFFLOAD_LAG = Gauge(
    "processor_offload_lag_records",
    "Records the source partition holds beyond the highest offset in a finished segment (a growing "
    "value means copies are not keeping up or are stalled)",
    ["topic", "partition"],
)
METADATA_SKIPPED = Counter(
    "processor_metadata_records_skipped_total",
    "Metadata records skipped (undecodable or illegal)",
    ["reason"],
)
OFFSETS_LOST = Counter(
    "processor_offsets_lost_total",
    "Source offsets deleted by the broker's retention before they were offloaded (data loss)",
    ["topic", "partition"],
)
SEGMENTS_DELETED = Counter(
    "processor_remote_segments_deleted_total",
    "Remote segments that reached DELETE_SEGMENT_FINISHED, by reason",
    ["reason"],
)
DELETE_FAILURES = Counter(
    "processor_remote_delete_failures_total",
    "Failed attempts to delete a remote segment's objects (each is retried)",
)
COPY_BLOCKED = Counter(
    "processor_copy_blocked_total",
    "Segment copy attempts that failed with an error retrying cannot fix (access denied, missing "
    "bucket); the segment stays pending and is tried again at the maximum backoff",
)
FETCH_ERRORS = Counter(
    "processor_source_fetch_errors_total", "Failed fetches of source record batches, by error", ["error"]
)

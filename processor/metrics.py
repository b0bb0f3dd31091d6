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

# -- issue 10: the rest of the catalogue (README "Operating it" has the table) ----------------------

OFFLOAD_LAG_SECONDS = Gauge(
    "processor_offload_lag_seconds",
    "Age of the oldest record of the partition not yet in a finished remote segment (record "
    "timestamp to now; 0 when everything consumed is remote): the figure to alert on",
    ["topic", "partition"],
)
SEGMENTS_BY_STATE = Gauge(
    "processor_segments",
    "Segments this worker holds, by state: open (filling), pending (sealed, waiting for a copy), copying",
    ["state"],
)
CONSUMPTION_PAUSES = Counter(
    "processor_consumption_pauses_total", "Times consumption paused because the offload buffer was full"
)
S3_REQUESTS = Counter(
    "processor_s3_requests_total", "S3 API calls sent (each HTTP attempt), by operation", ["operation"]
)
S3_ERRORS = Counter(
    "processor_s3_request_errors_total",
    "S3 API attempts that failed, by operation and error code (or exception name)",
    ["operation", "code"],
)
S3_RETRIES = Counter(
    "processor_s3_request_retries_total", "S3 API attempts retried by the SDK, by operation", ["operation"]
)
STORAGE_REACHABLE = Gauge(
    "processor_storage_reachable", "1 while the last S3 probe (HeadBucket) succeeded, 0 otherwise"
)
REMOTE_FETCH_SECONDS = Histogram(
    "processor_remote_fetch_seconds",
    "Time to serve one remote read (lookup, ranged GETs, decode), by how it was addressed",
    ["by"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
FOLLOWER_APPLIED = Counter(
    "processor_follower_records_applied_total", "Metadata records the follower applied to its cache"
)
FOLLOWER_SKIPPED = Counter(
    "processor_follower_records_skipped_total",
    "Metadata records the follower skipped (undecodable, illegal, or not followed)",
)
FOLLOWER_LAG = Gauge(
    "processor_follower_lag_records",
    "Metadata records the follower has not applied yet, by metadata partition",
    ["partition"],
)
HEALTH_READY = Gauge(
    "processor_ready", "1 while /readyz reports ready, 0 otherwise (as of the last /readyz request)"
)

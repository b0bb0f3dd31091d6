"""Prometheus metrics of the worker (served at /metrics by the worker's web server).

Named after Kafka's own tiered-storage metrics (KIP-405 ``RemoteCopy*``/``RemoteFetch*``/
``RemoteDelete*``, KIP-963 ``RemoteCopyLag*``, ``RemoteLogSize*``, ``RemoteDeleteLag*``), one name
per thing: moving a segment to remote storage is "copy" everywhere. The metrics table of
docs/operations.md lists every one (tests/unit/test_metric_catalogue.py checks it).
"""

from __future__ import annotations

import platform

from prometheus_client import Counter, Gauge, Histogram, Info

from processor import __version__

BUILD_INFO = Info("processor_build", "Version of the processor and of the Python running it")
BUILD_INFO.info(
    {
        "version": __version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }
)

# -- copying segments to remote storage --------------------------------------------------------------

RECORDS_TAKEN = Counter("processor_records_taken_total", "Records encoded into open segments")
RECORDS_COPIED = Counter(
    "processor_records_copied_total", "Records in segments copied to remote storage", ["topic"]
)
COPY_BYTES = Counter(
    "processor_remote_copy_bytes_total",
    "Data object bytes of segments copied to remote storage (Kafka: RemoteCopyBytesPerSec)",
    ["topic"],
)
COPY_REQUESTS = Counter(
    "processor_remote_copy_requests_total",
    "Segment copy attempts (Kafka: RemoteCopyRequestsPerSec)",
    ["topic"],
)
COPY_ERRORS = Counter(
    "processor_remote_copy_errors_total",
    "Failed segment copy attempts; each is retried (Kafka: RemoteCopyErrorsPerSec)",
    ["topic"],
)
SEGMENTS_COPIED = Counter(
    "processor_segments_copied_total", "Segments that reached COPY_SEGMENT_FINISHED", ["topic"]
)
SEGMENTS_ROLLED = Counter("processor_segments_rolled_total", "Segments sealed, by reason", ["reason"])
COPY_SECONDS = Histogram(
    "processor_remote_copy_seconds",
    "Time to copy one segment",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
COPY_LAG_BYTES = Gauge(
    "processor_remote_copy_lag_bytes",
    "Bytes the worker holds of the partition that are not in remote storage yet: the open segment "
    "and sealed segments waiting or being copied (Kafka: RemoteCopyLagBytes)",
    ["topic", "partition"],
)
COPY_LAG_SEGMENTS = Gauge(
    "processor_remote_copy_lag_segments",
    "Sealed segments of the partition waiting for a copy or being copied (Kafka: RemoteCopyLagSegments)",
    ["topic", "partition"],
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
COPY_LAG_RECORDS = Gauge(
    "processor_remote_copy_lag_records",
    "Records the source partition holds beyond the highest offset in a finished segment, from the "
    "high watermark asked of the broker on its own schedule (so it grows when fetching stalls)",
    ["topic", "partition"],
)
HIGH_WATERMARK_ERRORS = Counter(
    "processor_high_watermark_errors_total",
    "Failed asks for the source partitions' high watermarks (ListOffsets); the copy lag in records "
    "is not updated meanwhile",
)
METADATA_REJECTED = Counter(
    "processor_metadata_records_rejected_total",
    "Metadata records the fold rejected (never served), by reason: undecodable, invalid (out of "
    "bounds), stale_epoch (not the partition's current claim), no_claim, old_topic_id, illegal "
    "(state machine), overlap (a finished segment over a served one), internal_error",
    ["reason"],
)
METADATA_UNAUTHENTICATED = Counter(
    "processor_metadata_unauthenticated_total",
    "Records of the metadata or deletion topic (domain) whose authenticator does not verify, by "
    "reason (unsigned, malformed, unknown_version, unknown_key, bad_tag) and outcome: refused (never "
    "folded: PROCESSOR_METADATA_AUTH=require) or folded (sign, or an unsigned record from before "
    "PROCESSOR_METADATA_AUTH_UNSIGNED_BEFORE)",
    ["domain", "reason", "outcome"],
)
FENCED_REVOCATIONS = Counter(
    "processor_fenced_revocations_total",
    "Partitions this worker stopped writing because the metadata showed another claim holds them",
)
OFFSETS_LOST = Counter(
    "processor_offsets_lost_total",
    "Source offsets deleted by the broker's retention before they were copied (data loss)",
    ["topic", "partition"],
)
SEGMENTS_DELETED = Counter(
    "processor_remote_segments_deleted_total",
    "Remote segments that reached DELETE_SEGMENT_FINISHED, by reason",
    ["reason"],
)
DELETIONS_REFUSED = Counter(
    "processor_deletions_refused_total",
    "Deletions a worker refused for want of proof that the objects are garbage (a segment with a "
    "manifest that its view does not serve, objects another writer or topic id wrote), by reason",
    ["reason"],
)
DELETION_PROOFS_FAILED = Counter(
    "processor_deletion_proofs_failed_total",
    "Deletions left for the next pass because their proof could not be read (a storage error, a "
    "rewrite's or source's index missing or not verifying, a rewrite that does not cover its source), "
    "by reason",
    ["reason"],
)
DELETE_FAILURES = Counter(
    "processor_remote_delete_failures_total",
    "Failed attempts to delete a remote segment's objects (each is retried)",
)
MANIFEST_WRITE_FAILURES = Counter(
    "processor_manifest_write_failures_total",
    "Segment manifests that could not be written after their copy (the owner writes them later)",
)
KEY_FILTER_FAILURES = Counter(
    "processor_key_filter_failures_total",
    "Segments copied without a key filter: their records' framing did not check (erasures read them whole)",
)
MANIFESTS_BACKFILLED = Counter(
    "processor_manifests_backfilled_total",
    "Missing segment manifests the partition's owner wrote for served segments",
)

COPY_LAG_SECONDS = Gauge(
    "processor_remote_copy_lag_seconds",
    "Age of the oldest record of the partition not yet in a finished remote segment (record "
    "timestamp to now; for records not fetched yet, at least the time since the high watermark "
    "first showed them; 0 when everything is remote): the figure to alert on",
    ["topic", "partition"],
)

# -- the remote log ----------------------------------------------------------------------------------

REMOTE_LOG_SIZE_BYTES = Gauge(
    "processor_remote_log_size_bytes",
    "Data bytes of the finished remote segments of the topic's partitions this worker leads "
    "(sum over workers for the topic; Kafka: RemoteLogSizeBytes)",
    ["topic"],
)
REMOTE_LOG_SEGMENTS = Gauge(
    "processor_remote_log_segments",
    "Finished remote segments of the topic's partitions this worker leads (sum over workers; "
    "Kafka: RemoteLogMetadataCount)",
    ["topic"],
)
DELETE_LAG_BYTES = Gauge(
    "processor_remote_delete_lag_bytes",
    "Bytes of remote segments retention made eligible for deletion that are not deleted yet, after "
    "the last retention pass (Kafka: RemoteDeleteLagBytes)",
    ["topic", "partition"],
)
DELETE_LAG_SEGMENTS = Gauge(
    "processor_remote_delete_lag_segments",
    "Remote segments eligible for deletion not deleted yet, after the last retention pass (Kafka: "
    "RemoteDeleteLagSegments)",
    ["topic", "partition"],
)

# -- the rest of the catalogue (docs/operations.md, "Metrics", has the table) ------------------------

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
REMOTE_FETCH_REQUESTS = Counter(
    "processor_remote_fetch_requests_total",
    "Remote reads served or attempted (Kafka: RemoteFetchRequestsPerSec)",
    ["topic"],
)
REMOTE_FETCH_BYTES = Counter(
    "processor_remote_fetch_bytes_total",
    "Bytes read from remote storage for remote reads (Kafka: RemoteFetchBytesPerSec)",
    ["topic"],
)
REMOTE_FETCH_ERRORS = Counter(
    "processor_remote_fetch_errors_total",
    "Remote reads that failed: storage errors, missing or corrupt objects; an offset not in "
    "remote storage is an answer, not an error (Kafka: RemoteFetchErrorsPerSec)",
    ["topic"],
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
COPY_BLOCKED = Counter(
    "processor_remote_copy_blocked_total",
    "Segment copy attempts that failed with an error retrying cannot fix (access denied, missing "
    "bucket); the segment stays pending and is tried again at the maximum backoff",
    ["topic"],
)
FETCH_ERRORS = Counter(
    "processor_source_fetch_errors_total", "Failed fetches of source record batches, by error", ["error"]
)

# -- the Spark sources (counted in the process that skipped: the driver while planning, a Python
# worker while reading) -----------------------------------------------------------------------------

SPARK_DATA_LOSS = Counter(
    "processor_spark_data_loss_total",
    "Data losses a tiered_records read skipped with failOnDataLoss=false, by reason",
    ["reason"],
)
SPARK_DATA_LOSS_OFFSETS = Counter(
    "processor_spark_data_loss_offsets_total",
    "Offsets a tiered_records read skipped as lost with failOnDataLoss=false, by reason (where known)",
    ["reason"],
)

# -- the audit (processor audit: the Spark driver's process; --metrics-port serves them) --------------

AUDIT_SEGMENTS_CHECKED = Counter(
    "processor_audit_segments_checked_total", "Segments whose objects the audit's storage checks read"
)
AUDIT_BYTES_READ = Counter("processor_audit_bytes_read_total", "Object bytes the audit's storage checks read")
AUDIT_REQUESTS = Counter("processor_audit_requests_total", "Storage requests the audit's checks sent")
AUDIT_OPEN_PROBLEMS = Gauge(
    "processor_audit_open_problems", "Problems the audit has open, by severity", ["severity"]
)
AUDIT_SCRUB_PROGRESS = Gauge(
    "processor_audit_scrub_progress", "Share of the current storage scrub cycle's segments checked (0..1)"
)
AUDIT_LAST_COMPLETE_SCRUB = Gauge(
    "processor_audit_last_complete_scrub_timestamp_seconds",
    "When the audit last finished checking every segment's objects (a full scrub cycle)",
)

# -- the Kafka-protocol gateway (processor gateway) ---------------------------------------------------

GATEWAY_REQUESTS = Counter(
    "processor_gateway_requests_total", "Kafka requests the gateway received, by API key", ["api"]
)
GATEWAY_ERRORS = Counter(
    "processor_gateway_errors_total",
    "Kafka requests the gateway could not answer (their connection closed), by API key and kind",
    ["api", "kind"],
)
GATEWAY_FETCH_BYTES = Counter(
    "processor_gateway_fetch_bytes_total",
    "Record batch bytes the gateway answered Fetch requests with, by topic and source (archive, broker)",
    ["topic", "source"],
)
GATEWAY_FETCH_RECORDS = Counter(
    "processor_gateway_fetch_records_total",
    "Records the gateway answered Fetch requests with (transaction markers left out), by topic and "
    "source (archive, broker)",
    ["topic", "source"],
)
BLOCK_CACHE = Counter(
    "processor_block_cache_total",
    "Block reads asked of the local block cache, by result (hit, miss; damaged: a file gone, short "
    "or failing its CRC, read from storage instead; not_written: a block that could not be cached)",
    ["result"],
)
BLOCK_CACHE_BYTES = Gauge("processor_block_cache_bytes", "Bytes of blocks in the local block cache")
GATEWAY_CONNECTIONS = Gauge("processor_gateway_connections", "Client connections the gateway holds")
GATEWAY_PREFETCH = Counter(
    "processor_gateway_prefetch_total",
    "Archived answers of the gateway's Fetch requests, by whether a read-ahead had them ready (hit, miss)",
    ["result"],
)

# -- snapshots of the folded metadata (processor/follower/snapshots.py) -------------------------------

SNAPSHOTS_WRITTEN = Counter(
    "processor_metadata_snapshots_written_total", "Snapshots of the folded metadata written to the bucket"
)
SNAPSHOTS_LOADED = Counter(
    "processor_metadata_snapshots_loaded_total",
    "Snapshots a follower cache started from (one per metadata partition) instead of the topic's start",
)
SNAPSHOTS_REFUSED = Counter(
    "processor_metadata_snapshots_refused_total",
    "Snapshots not loaded, by reason (corrupt, foreign, truncated, gone, diverged, unreadable): the "
    "next older one or the topic was read instead",
    ["reason"],
)
SNAPSHOT_FAILURES = Counter(
    "processor_metadata_snapshot_failures_total",
    "Scheduled snapshot writes that failed (the next one is tried at the next interval)",
)

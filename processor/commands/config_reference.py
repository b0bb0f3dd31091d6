"""The settings reference of docs/configuration.md, rendered from the settings model.

Names and defaults come from :class:`processor.config.Settings`; each setting's meaning is written
here, and a setting without one (or a meaning without a setting) is an error, so the table cannot
drift from the model. ``python -m processor.commands.config_reference docs/configuration.md``
(``make docs``) rewrites the table between the ``<!-- settings:begin -->`` and
``<!-- settings:end -->`` markers; tests/unit/test_docs.py checks the committed file is up to date.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from processor.config import ENV_PREFIX, Settings
from processor.units import format_duration_ms, format_size

BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"

# Defaults that are not a plain value of the model: computed at start, or "unset" meaning something.
DEFAULTS: dict[str, str] = {
    "topics": "(required)",
    "metadata_replication_factor": "min(3, brokers)",
    "s3_endpoint_url": "AWS",
    "s3_region": "AWS chain",
    "data_dir": "`./data`",
    "worker_id": "host name",
    "follow_topics": "all",
    "gateway_advertised_host": "the gateway host",
    "gateway_tls_certfile": "plaintext",
    "gateway_tls_keyfile": "none",
    "gateway_tls_client_cafile": "none",
    "follow_metadata_partitions": "all",
    "ssl_cafile": "system CAs",
    "worker_urls": "`http://127.0.0.1:$PROCESSOR_WEB_PORT`",
    "encryption_keyring": "none",
    "metadata_auth_keys": "none",
    "metadata_auth_unsigned_before": "none",
    "kms_key_id": "none",
    "kms_topic_key_ids": "none",
    "s3_sse_kms_key_id": "the bucket's default key",
    "gcs_bucket": "none",
    "gcs_endpoint_url": "Google's",
    "gcs_project": "the credentials'",
    "gcs_credentials_file": "application default",
    "azure_container": "none",
    "azure_account_url": "the connection string's",
    "azure_connection_string": "none",
    "azure_account_key": "none",
    "azure_sas_token": "none",
}

SECURITY = "[Security](security.md#connecting-to-a-secured-kafka)"

MEANINGS: dict[str, str] = {
    "bootstrap_servers": "Kafka bootstrap servers",
    "topics": "comma-separated source topics to offload",
    "metadata_topic": "compacted topic of segment metadata (created if missing)",
    "metadata_partitions": "partitions when the metadata topic is created",
    "metadata_replication_factor": (
        "replication factor of every topic the processor creates: the metadata topic, the deletion "
        "topic and Faust's `<PROCESSOR_APP_ID>-__assignor-__leader`; unset, it is 3 on a cluster of 3 "
        "or more brokers (what Confluent Cloud requires) and 1 on a single broker. A factor of 3 or "
        "more also sets `min.insync.replicas` to factor-1 at creation. A setting the cluster refuses "
        "at creation (a policy, an invalid factor) stops the start with an error naming the topic, "
        "the setting and this variable"
    ),
    "app_id": "consumer group / Faust app id; workers sharing it share the work",
    "s3_endpoint_url": "S3 endpoint (MinIO, SeaweedFS, ...)",
    "s3_bucket": "bucket (must exist)",
    "s3_prefix": "key prefix inside the bucket (`a/b`; no `..` or empty parts)",
    "s3_region": "region of the bucket (unset: the AWS chain's, e.g. `AWS_DEFAULT_REGION` or the profile's)",
    "s3_part_bytes": "multipart part size (>= 5 MiB)",
    "s3_upload_concurrency": "segments copied at once, and parts in flight per upload",
    "segment_bytes": "a segment rolls at this size ...",
    "segment_ms": ("... or this long after its first record arrived (wall clock; idle partitions roll too)"),
    "block_bytes": "block size inside a segment: the unit of a remote read",
    "buffer_bytes": (
        "the offload buffer's bound: encoded bytes held until uploaded; consumption pauses when full "
        "(>= segment size)"
    ),
    "data_dir": "local state: Faust's data and the follower's RocksDB cache (`metadata-cache/`)",
    "worker_id": "this worker's id, recorded as the writer of each segment",
    "web_port": "port of the web server (health, metrics, read API)",
    "web_host": "address the web server binds (`127.0.0.1`: this host only)",
    "web_token": (
        "`/fetch`, `/segments` and `POST /offload` require `Authorization: Bearer <token>` (401 "
        "otherwise); health and metrics stay open. A secret (`***` in `processor config`). Set but "
        "empty is a configuration error"
    ),
    "web_auth": (
        "`none`: serve the read API without a token on purpose. Without a token and without `none`, "
        "the server starts only on a loopback `PROCESSOR_WEB_HOST`"
    ),
    "web_enabled": "serve the web endpoints",
    "follower_enabled": (
        "serve reads (`/fetch`, `/segments`) from the follower's cache; a worker always follows the "
        "metadata of its own source topics (it reads its claims back through it)"
    ),
    "gateway_host": "`processor gateway`: address its Kafka listeners bind",
    "gateway_port": (
        "`processor gateway`: the bootstrap port Kafka clients are given; the broker with node id n "
        "is reached on this port + 1 + n - the first of `PROCESSOR_GATEWAY_NODE_IDS`"
    ),
    "gateway_advertised_host": "`processor gateway`: the host name clients reach it by (in Metadata answers)",
    "gateway_node_ids": "`processor gateway`: the upstream brokers' node ids given a port, `first-last`",
    "gateway_tls_certfile": "`processor gateway`: its TLS certificate (PEM) towards clients",
    "gateway_tls_keyfile": "`processor gateway`: the private key (PEM) of `PROCESSOR_GATEWAY_TLS_CERTFILE`",
    "gateway_tls_client_cafile": (
        "`processor gateway`: clients must present a certificate this CA (PEM) signed (mutual TLS)"
    ),
    "gateway_prefetch_bytes": (
        "`processor gateway`: bytes read ahead of consumers reading the archive in order (in ranges "
        "of up to 8 MiB, up to three per partition), in total; `0`: no read-ahead"
    ),
    "gateway_cache_bytes": (
        "`processor gateway`: bytes of archived blocks kept on local disk (`PROCESSOR_DATA_DIR`/"
        "`block-cache`, emptied at start) once read, so ranges read again skip S3; the least recently "
        "read go first; `0`: no cache"
    ),
    "gateway_request_timeout_ms": (
        "`processor gateway`: how long a client's request may take to arrive whole once its first byte "
        "has; then its connection is closed (counted in `processor_gateway_errors_total`, "
        '`kind="request_timeout"`)'
    ),
    "gateway_archive_reads": (
        "`processor gateway`: `below-log-start` (the archive answers offsets the brokers no longer "
        "have) or `archived` (every archived offset: catch-up reads stay off the brokers' disks)"
    ),
    "follow_topics": (
        "comma-separated source topics whose metadata the follower keeps (a worker's own topics are "
        "always kept)"
    ),
    "follow_metadata_partitions": "comma-separated metadata partitions to follow (overrides the topics)",
    "session_timeout_ms": (
        "consumer-group session timeout: a worker silent this long loses its partitions, and its "
        "writer epoch is fenced out"
    ),
    "copy_retry_backoff_ms": "first retry delay of a failed copy (doubles each time)",
    "copy_retry_backoff_max_ms": "longest retry delay",
    "archive_compression": (
        "`keep` (or `off`): store batches as fetched (a compressed topic stays compressed); `zstd`: "
        "blocks holding uncompressed batches are stored as one zstd frame"
    ),
    "encryption": (
        "encryption at rest of new segments: `none`, `keyring` or `kms` (a fresh AES-256 data key per "
        "segment, wrapped): see [Encryption at rest](encryption.md)"
    ),
    "encryption_keyring": (
        "directory of key files (`processor keyring new`); readers of keyring-encrypted segments need it"
    ),
    "kms_key_id": "KMS key id or ARN new data keys are made under (`PROCESSOR_ENCRYPTION=kms`)",
    "kms_topic_key_ids": "keys of topics' own: `topic=key-id,...` (what `processor shred` can destroy)",
    "s3_sse": "S3 server-side encryption of every object: `none`, `AES256` (SSE-S3) or `aws:kms` (SSE-KMS)",
    "s3_sse_kms_key_id": "SSE-KMS key id or ARN",
    "s3_sse_bucket_key": "SSE-KMS with S3 Bucket Keys (fewer KMS requests)",
    "storage": (
        "the archive's store: `s3` (S3 or an S3-compatible store), `gcs` (Google Cloud Storage) or "
        "`azure` (Azure Blob Storage); `PROCESSOR_S3_PREFIX`, `_S3_PART_BYTES` and "
        "`_S3_UPLOAD_CONCURRENCY` apply to each"
    ),
    "gcs_bucket": "`gcs`: the bucket (must exist)",
    "gcs_endpoint_url": "`gcs`: another endpoint (a private one, or the fake-gcs-server emulator)",
    "gcs_project": "`gcs`: the project the client bills requests to",
    "gcs_credentials_file": (
        "`gcs`: a service-account key file (JSON); unset, application-default credentials: "
        "`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's, or the metadata server (workload identity on GKE)"
    ),
    "gcs_anonymous": "`gcs`: send no credentials (an emulator)",
    "azure_container": "`azure`: the container (must exist)",
    "azure_account_url": "`azure`: `https://ACCOUNT.blob.core.windows.net`",
    "azure_connection_string": "`azure`: a storage connection string (a secret, `***` in `processor config`)",
    "azure_account_key": "`azure`: the account's shared key (a secret)",
    "azure_sas_token": (
        "`azure`: a SAS token (a secret; read, write, delete and list on the container for a worker). "
        "None of the three: `DefaultAzureCredential` (workload identity on AKS, managed identity, Azure CLI)"
    ),
    "metadata_auth": (
        "`off`, `sign` (writers add a MAC to every metadata and deletion topic record) or `require` "
        "(readers also refuse what does not verify): see [security](security.md#authenticated-metadata)"
    ),
    "metadata_auth_keys": (
        "directory of key files (`processor keyring new --dir DIR`) the metadata authenticator uses; "
        "every worker, command, gateway and Spark node needs it"
    ),
    "metadata_auth_unsigned_before": (
        "under `require`: unsigned records the broker appended before this time (ms since the epoch) "
        "are still folded (the records from before signing)"
    ),
    "fetch_concurrency": "source fetch requests in flight (each for the ready partitions of one broker)",
    "security_protocol": f"`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`: see {SECURITY}",
    "sasl_mechanism": "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`",
    "sasl_username": "PLAIN and SCRAM user name",
    "sasl_password": "PLAIN and SCRAM password (a secret: `***` in `processor config` and logs)",
    "sasl_oauth_token_provider": (
        "OAUTHBEARER: `module:function`, a callable returning `(token, expires_at)` (seconds since the "
        "epoch) or a token string (taken as valid 5 minutes); or `aws-msk-iam`"
    ),
    "sasl_oauth_aws_region": "`aws-msk-iam`: the cluster's region",
    "sasl_oauth_aws_role_arn": (
        "`aws-msk-iam`: a role to assume first (else the AWS credential chain's identity)"
    ),
    "ssl_cafile": "PEM CA bundle that signs the brokers' certificates",
    "ssl_certfile": "PEM client certificate for mutual TLS (with `PROCESSOR_SSL_KEYFILE`: both or neither)",
    "ssl_keyfile": "PEM key of the client certificate",
    "ssl_key_password": "password of an encrypted client key (a secret)",
    "ssl_check_hostname": (
        "the broker certificate must name the host dialled; `false` accepts any certificate the CA signed"
    ),
    "log_level": "`debug`, `info`, `warn` (or `warning`), `error`, `crit` (in any case)",
    "remote_retention_ms": (
        "time retention of every topic, from the max record timestamp (`-1`: forever): see "
        "[Retention and deletion](retention-and-deletion.md)"
    ),
    "remote_retention_bytes": (
        "size retention per partition (data bytes of finished segments; `-1`: no limit)"
    ),
    "remote_retention_overrides": (
        "per topic: `orders=ms:604800000,payments=bytes:1073741824` (`-1` = unlimited)"
    ),
    "retention_check_ms": "interval of the retention pass",
    "deletion_topic": "compacted topic of failed deletions (created if missing)",
    "multipart_abort_after_ms": "age after which an unfinished multipart upload counts as abandoned",
    "upload_bytes_per_second": "upload rate limit per worker (KIP-956's copy quota; `-1`: unlimited)",
    "merge_target_bytes": "`processor merge`: a merged segment's size at most (the sum of its sources)",
    "merge_small_bytes": "`processor merge`: segments smaller than this are merged with their neighbours",
    "merge_min_age_ms": "`processor merge`: segments uploaded less than this long ago are left as they are",
    "merge_check_ms": (
        "the worker merges the small segments of the partitions it leads every this long, a few runs "
        "at a time (`0`: only `processor merge` merges); every reader must know merged segments first"
    ),
    "snapshot_interval_ms": (
        "workers write a snapshot of the folded metadata of the metadata partitions they follow to the "
        "bucket every this long (jittered; `0`: only `processor snapshot` writes them)"
    ),
    "snapshots_kept": "snapshots kept per metadata partition; older ones are deleted after each write",
    "snapshot_load": (
        "a follower cache that never read a metadata partition starts from its newest valid snapshot "
        "and reads only the topic after it (`false`: always the topic from its start)"
    ),
    "erasure_secret": (
        "keys each new segment's key filter (`{data}-keys`: `processor erase` reads only segments that "
        "may hold a key) and the hashed keys of the erasure audit trail; at least 16 characters, the "
        "same on every worker and wherever `processor erase` runs; unset: no filters, erase refuses. "
        "A worker with it compiles the filter's code at start (~1.5 s) and uses ~128 MiB more memory"
    ),
    "worker_urls": "workers `processor offload` asks (comma-separated)",
    "log_format": "`text`, or `json`: every line the process writes is one JSON object",
    "storage_probe_interval_ms": (
        "interval of the readiness probes (S3 HeadBucket, Kafka metadata, follower lag)"
    ),
}


def variable(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def default_text(name: str, field: FieldInfo) -> str:
    """A setting's default as the table shows it: sizes and durations with units, ``-1`` as
    unlimited, a computed or absent default in words."""
    if name in DEFAULTS:
        return DEFAULTS[name]
    value: Any = field.default
    if value is None:
        return "unset"
    if value in ("", ()):
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value == -1:
        return "`-1` (unlimited)"
    if isinstance(value, int) and name.endswith("_bytes"):
        return f"`{format_size(value)}`"
    if isinstance(value, int) and name.endswith("_ms"):
        return f"`{format_duration_ms(value)}`"
    return f"`{value}`"


def problems() -> list[str]:
    """Settings without a meaning here, and meanings or defaults of settings that do not exist."""
    fields = set(Settings.model_fields)
    out = [
        f"{variable(n)} has no meaning in config_reference.MEANINGS" for n in sorted(fields - set(MEANINGS))
    ]
    out += [f"MEANINGS names {variable(n)}, which is not a setting" for n in sorted(set(MEANINGS) - fields)]
    out += [f"DEFAULTS names {variable(n)}, which is not a setting" for n in sorted(set(DEFAULTS) - fields)]
    return out


def render_table() -> str:
    """The markdown table of every setting, in the model's order: variable, default, meaning."""
    found = problems()
    if found:
        raise ValueError("the settings reference is out of date:\n  " + "\n  ".join(found))
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        rows.append(f"| `{variable(name)}` | {default_text(name, field)} | {MEANINGS[name]} |")
    return "\n".join(rows) + "\n"


def replace_table(document: str, table: str) -> str:
    """``document`` with the text between the markers replaced by ``table``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN} ... {END} section")
    return document[: start + len(BEGIN)] + "\n" + table + document[end:]


def table_in(document: str) -> str:
    """The text between the markers (what :func:`render_table` must produce)."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN} ... {END} section")
    return document[start + len(BEGIN) : end].removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
    """Rewrite the settings table of each file named (default: docs/configuration.md)."""
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)] or [Path("docs/configuration.md")]
    table = render_table()
    for path in paths:
        text = path.read_text()
        updated = replace_table(text, table)
        if updated != text:
            path.write_text(updated)
            print(f"updated {path}")
        else:
            print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The settings model: one frozen, validated object of every ``PROCESSOR_*`` setting, its defaults,
units and the checks across settings. Built from the environment by
:func:`processor.config.environment.load_settings`.
"""

from __future__ import annotations

import functools
import re
import socket
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from processor.config.parsing import parse_overrides, with_units
from processor.config.variables import ENV_PREFIX
from processor.kafka.security import ENV_NAMES, KafkaConnection, KafkaSecurity
from processor.lifecycle.retention_config import RetentionOverride
from processor.segment.object_keys import validate_prefix, validate_topic
from processor.units import parse_duration_ms, parse_size

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="ignore", case_sensitive=False
    )

    bootstrap_servers: str = Field(default="127.0.0.1:9092", min_length=1)
    topics: Annotated[tuple[str, ...], NoDecode] = ()
    metadata_topic: str = "__remote_log_metadata"
    metadata_partitions: int = Field(default=4, ge=1, le=1000)
    # Replication factor of the topics the processor creates (metadata, deletion, Faust's own);
    # None (unset): min(3, the cluster's brokers), see processor.kafka.admin.replication_for.
    metadata_replication_factor: int | None = Field(default=None, ge=1, le=32)
    # A pattern that is not a list of values has its description, the error's plain words (_describe).
    app_id: str = Field(
        default="tiered-storage-processor",
        pattern=r"^[A-Za-z0-9._-]{1,200}$",
        description="1 to 200 letters, digits, '.', '_' or '-'",
    )
    s3_endpoint_url: str | None = None
    s3_bucket: str = Field(
        default="tiered-storage",
        pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        description="an S3 bucket name: 3 to 63 lower-case letters, digits, '.' or '-', "
        "beginning and ending with a letter or digit",
    )
    s3_prefix: str = ""
    s3_region: str | None = None
    s3_part_bytes: int = Field(default=16 * MiB, ge=5 * MiB, le=5 * 1024 * MiB)
    s3_upload_concurrency: int = Field(default=8, ge=1, le=256)
    segment_bytes: int = Field(default=64 * MiB, ge=1024, le=5 * 1024 * MiB)
    segment_ms: int = Field(default=60_000, ge=10)
    block_bytes: int = Field(default=1 * MiB, ge=1024, le=256 * MiB)
    buffer_bytes: int = Field(default=256 * MiB, ge=1024)
    data_dir: Path = Path("./data")
    worker_id: str = Field(
        default_factory=socket.gethostname,
        pattern=r"^[A-Za-z0-9._:-]{1,128}$",
        description="1 to 128 letters, digits, '.', '_', ':' or '-'",
    )
    web_port: int = Field(default=6066, ge=1, le=65535)
    # Address the web server binds (health, metrics, /fetch, /segments); 0.0.0.0 = every interface.
    web_host: str = Field(default="0.0.0.0", min_length=1)
    # /fetch, /segments and POST /offload require "Authorization: Bearer <token>" (health and
    # metrics stay open). A secret: never logged, masked by `processor config`. Without a token the
    # worker starts only on a loopback web_host or with web_auth=none (open on purpose).
    web_token: SecretStr | None = None
    web_auth: str = Field(default="token", pattern=r"^(token|none)$")
    web_enabled: bool = True
    follower_enabled: bool = True
    follow_topics: Annotated[tuple[str, ...], NoDecode] = ()
    # `processor gateway`: the Kafka-protocol address clients are given (bootstrap port; the broker with
    # node id n is reached on gateway_port + 1 + n - first of gateway_node_ids), the name clients reach
    # it by, and which fetches the archive answers (below-log-start: offsets the brokers no longer have;
    # archived: every archived offset, keeping catch-up consumers off the brokers' disks).
    gateway_host: str = Field(default="0.0.0.0", min_length=1)
    gateway_port: int = Field(default=19092, ge=1, le=65535)
    gateway_advertised_host: str | None = None
    # The upstream brokers' node ids the gateway gives a port: "first-last" (at most 1000 of them).
    gateway_node_ids: str = Field(
        default="0-63", pattern=r"^[0-9]{1,10}-[0-9]{1,10}$", description="first-last node id, e.g. 0-63"
    )
    # TLS towards the gateway's clients: its certificate and key (PEM); with a CA file, clients must
    # present a certificate it signed (mutual TLS). Unset: plaintext.
    gateway_tls_certfile: str | None = None
    gateway_tls_keyfile: str | None = None
    gateway_tls_client_cafile: str | None = None
    # Bytes the gateway may hold read ahead of sequential archive readers, in total (0: no read-ahead).
    gateway_prefetch_bytes: int = Field(default=128 * MiB, ge=0)
    # Bytes of blocks the gateway keeps on local disk (under data_dir) once read (0: no block cache).
    gateway_cache_bytes: int = Field(default=2048 * MiB, ge=0)
    # Milliseconds a client's request may take to arrive whole once its first byte has (then its
    # connection is closed).
    gateway_request_timeout_ms: int = Field(default=30_000, ge=1, le=3_600_000)
    gateway_archive_reads: str = Field(
        default="below-log-start",
        pattern=r"^(below-log-start|archived)$",
        description="below-log-start or archived",
    )
    follow_metadata_partitions: Annotated[tuple[int, ...], NoDecode] = ()
    # Consumer-group session timeout: a worker silent this long loses its partitions (and its writer
    # epoch: records it publishes afterwards are fenced out).
    session_timeout_ms: int = Field(default=10_000, ge=1000, le=3_600_000)
    copy_retry_backoff_ms: int = Field(default=500, ge=1)
    copy_retry_backoff_max_ms: int = Field(default=30_000, ge=1)
    # Archive compression (block format v2) and the batch source (processor/leader/batch_source.py).
    archive_compression: str = Field(default="keep", pattern=r"^(off|keep|zstd)$")  # off = keep
    fetch_concurrency: int = Field(default=4, ge=1, le=64)  # source fetch requests in flight
    # Kafka security, for every client of the process (processor/kafka/security.py): the protocol,
    # SASL (PLAIN, SCRAM, OAUTHBEARER through a token provider) and TLS (CA, client certificate).
    security_protocol: str = Field(default="PLAINTEXT", pattern=r"^(PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL)$")
    sasl_mechanism: str = Field(default="PLAIN", pattern=r"^(PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER)$")
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    # OAUTHBEARER: "module:function" returning (token, expires_at epoch s), or "aws-msk-iam" ([msk] extra)
    sasl_oauth_token_provider: str | None = None
    sasl_oauth_aws_region: str | None = None  # aws-msk-iam: the cluster's region
    sasl_oauth_aws_role_arn: str | None = None  # aws-msk-iam: a role to assume first (optional)
    ssl_cafile: str | None = None  # CA bundle for SSL / SASL_SSL (default: the system's)
    ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    ssl_keyfile: str | None = None  # its private key (PEM)
    ssl_key_password: SecretStr | None = None  # when that key is encrypted
    ssl_check_hostname: bool = True  # the broker certificate must name the host dialled
    log_level: str = Field(default="info", pattern=r"^(?i:debug|info|warn|warning|error|crit)$")
    # Remote retention and deletion (processor/lifecycle/): -1 = unlimited, like Kafka's retention.ms.
    remote_retention_ms: int = Field(default=-1, ge=-1)  # per topic, from the max record timestamp
    remote_retention_bytes: int = Field(default=-1, ge=-1)  # per partition, finished segments' data
    # per topic: "orders=ms:604800000,payments=bytes:1073741824" (see lifecycle/retention_config.py)
    remote_retention_overrides: Annotated[tuple[RetentionOverride, ...], NoDecode] = ()
    retention_check_ms: int = Field(default=30_000, ge=10)  # interval of the retention pass
    deletion_topic: str = "__remote_segments_to_be_deleted"  # failed deletions, retried from there
    multipart_abort_after_ms: int = Field(default=3_600_000, ge=60_000)  # abandoned multipart uploads
    upload_bytes_per_second: int = Field(default=-1, ge=-1)  # per worker; -1 = unlimited
    # merging small archived segments (processor/rewrite/): a merged segment's size at most, the
    # size below which a segment is worth merging, and how long after its upload a segment is left
    merge_target_bytes: int = Field(default=64 * MiB, ge=1024, le=5 * 1024 * MiB)
    merge_small_bytes: int = Field(default=8 * MiB, ge=1, le=5 * 1024 * MiB)
    merge_min_age_ms: int = Field(default=3_600_000, ge=0)
    # the worker merges its led partitions' small segments every this long (0: only `processor merge`)
    merge_check_ms: int = Field(default=0, ge=0)
    # snapshots of the folded metadata in the bucket (processor/follower/snapshots.py): a follower
    # cache that never read a metadata partition starts from its newest valid snapshot and folds
    # only the topic's tail; workers write them every this long (0: only `processor snapshot`)
    snapshot_interval_ms: int = Field(default=3_600_000, ge=0)
    snapshots_kept: int = Field(default=3, ge=1, le=1000)
    snapshot_load: bool = True
    # Keys the per-segment key filters written at copy time (`processor erase` reads only the
    # segments whose filter may hold a key) and the hashes of erased keys in the erasure audit trail.
    # At least 16 characters (`openssl rand -hex 32`); a secret: never logged. Unset: no filters are
    # written (erase scans every segment) and `processor erase` refuses to run.
    erasure_secret: SecretStr | None = None
    # workers `processor offload` asks (comma-separated base URLs); default http://127.0.0.1:WEB_PORT
    worker_urls: Annotated[tuple[str, ...], NoDecode] = ()
    # "text" (human-readable lines) or "json" (one JSON object per line, for log pipelines).
    log_format: str = Field(default="text", pattern=r"^(?i:text|json)$")
    # Time between the cheap S3 reachability probes (HeadBucket) that drive readiness.
    storage_probe_interval_ms: int = Field(default=10_000, ge=100)
    # Encryption at rest of new segments (processor/crypto/): none, or envelope encryption with a
    # fresh AES-256 data key per segment wrapped by a local key ring or AWS KMS. Readers open any
    # segment whose key provider they are given, whatever this says (old segments stay readable).
    encryption: str = Field(
        default="none", pattern=r"^(none|keyring|kms)$", description="none, keyring or kms"
    )
    # A directory of key files (`processor keyring new`); readers of keyring-encrypted segments need it.
    encryption_keyring: Path | None = None
    # KMS key (id, ARN or alias) new data keys are made under; per topic: "orders=alias/orders,...".
    # KMS is reached in PROCESSOR_S3_REGION (or the AWS default) at AWS_ENDPOINT_URL_KMS when set.
    kms_key_id: str | None = None
    kms_topic_key_ids: Annotated[tuple[tuple[str, str], ...], NoDecode] = ()
    # S3 server-side encryption of every object, a separate and simpler option: none, AES256 (SSE-S3)
    # or aws:kms (SSE-KMS, with s3_sse_kms_key_id or the bucket's default, and S3 Bucket Keys).
    s3_sse: str = Field(
        default="none", pattern=r"^(none|AES256|aws:kms)$", description="none, AES256 or aws:kms"
    )
    s3_sse_kms_key_id: str | None = None
    s3_sse_bucket_key: bool = True
    # The archive's store: s3 (S3 or an S3-compatible store), gcs (Google Cloud Storage) or azure
    # (Azure Blob Storage). PROCESSOR_S3_PREFIX, _S3_PART_BYTES and _S3_UPLOAD_CONCURRENCY apply to all.
    storage: str = Field(default="s3", pattern=r"^(s3|gcs|azure)$", description="s3, gcs or azure")
    gcs_bucket: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$",
        description="a GCS bucket name: lower-case letters, digits, '.', '_' or '-'",
    )
    gcs_endpoint_url: str | None = None
    gcs_project: str | None = None
    # A service-account key file; unset: application-default credentials (workload identity on GKE)
    gcs_credentials_file: Path | None = None
    gcs_anonymous: bool = False
    azure_container: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9]|-[a-z0-9]){1,61}[a-z0-9]?$",
        description="an Azure container name: 3 to 63 lower-case letters, digits or single '-'",
    )
    azure_account_url: str | None = None
    # Secrets: never logged, masked by `processor config`. None set: DefaultAzureCredential.
    azure_connection_string: SecretStr | None = None
    azure_account_key: SecretStr | None = None
    azure_sas_token: SecretStr | None = None
    # Authenticated metadata (processor/metadata/authentication.py, docs/security.md): off; sign
    # (writers add a MAC to every record of the metadata and deletion topics, readers count what
    # does not verify); require (readers also refuse it). Turn sign on everywhere, then require.
    metadata_auth: str = Field(
        default="off", pattern=r"^(off|sign|require)$", description="off, sign or require"
    )
    # A directory of key files (`processor keyring new --dir DIR`): every reader and writer needs it.
    metadata_auth_keys: Path | None = None
    # Under require: unsigned records the broker appended before this time (milliseconds since the
    # epoch) are still folded (an archive's records from before signing).
    metadata_auth_unsigned_before: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _units_and_adaptive_defaults(cls, data: Any) -> Any:
        """Every ``*_bytes`` field accepts sizes with units (64MiB) and every ``*_ms`` field
        durations with units (60s, 7d), by name, so fields added later get it too. Then defaults
        that would conflict with a value given adapt to it instead of failing."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, value in data.items():
            if isinstance(value, str) and name.endswith("_bytes"):
                data[name] = with_units(parse_size, name, value)
            elif isinstance(value, str) and name.endswith("_ms"):
                data[name] = with_units(parse_duration_ms, name, value)
        segment = data.get("segment_bytes")
        if isinstance(segment, int) and segment > 0:
            default_block = cls.model_fields["block_bytes"].default
            if "block_bytes" not in data and default_block > segment:
                data["block_bytes"] = max(1024, segment // 4) if segment >= 4096 else segment
            default_buffer = cls.model_fields["buffer_bytes"].default
            if "buffer_bytes" not in data and default_buffer < segment:
                data["buffer_bytes"] = 2 * segment
        return data

    @field_validator("web_token", mode="before")
    @classmethod
    def _no_empty_token(cls, value: Any) -> Any:
        """An empty token is a mistake (an unset Secret key, say), not a wish to turn auth off."""
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(raw, str) and not raw.strip():
            raise ValueError(
                "is set but empty; give a token, or unset it and choose PROCESSOR_WEB_AUTH=none "
                "(or a loopback PROCESSOR_WEB_HOST) to serve the read API without one"
            )
        return value

    @field_validator("erasure_secret", mode="before")
    @classmethod
    def _long_enough_secret(cls, value: Any) -> Any:
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(raw, str) and not 16 <= len(raw) <= 1024:
            raise ValueError(
                f"has {len(raw)} characters; give 16 to 1024 (say, the output of `openssl rand -hex 32`)"
            )
        return value

    @field_validator("topics", "follow_topics", "follow_metadata_partitions", "worker_urls", mode="before")
    @classmethod
    def _split_lists(cls, value: Any) -> Any:
        """Comma-separated lists, blanks ignored."""
        if isinstance(value, str):
            return tuple(t.strip() for t in value.split(",") if t.strip())
        return value

    @field_validator("topics", "follow_topics")
    @classmethod
    def _valid_topic_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for topic in value:
            validate_topic(topic)
        return value

    @field_validator("follow_metadata_partitions")
    @classmethod
    def _valid_follow_partitions(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(p < 0 for p in value):
            raise ValueError("metadata partitions are non-negative numbers")
        return value

    @field_validator("topics")
    @classmethod
    def _distinct_topics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("topics are listed more than once")
        return value

    @field_validator("metadata_topic", "deletion_topic")
    @classmethod
    def _valid_metadata_topic(cls, value: str) -> str:
        return validate_topic(value)

    @field_validator("remote_retention_overrides", mode="before")
    @classmethod
    def _parse_retention_overrides(cls, value: Any) -> Any:
        return parse_overrides(value) if isinstance(value, str) else value

    @field_validator("worker_urls")
    @classmethod
    def _valid_worker_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return tuple(url.rstrip("/") for url in value)

    @field_validator("upload_bytes_per_second", mode="before")
    @classmethod
    def _upload_rate_units(cls, value: Any) -> Any:
        """A size per second: 10MiB, 500k, or -1 (unlimited)."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        return -parse_size(text[1:]) if text.startswith("-") else parse_size(text)

    @field_validator("upload_bytes_per_second")
    @classmethod
    def _valid_upload_rate(cls, value: int) -> int:
        if value == 0:
            raise ValueError("0 would stop every upload; use -1 for unlimited or a positive rate")
        return value

    @field_validator("s3_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        return validate_prefix(value)

    @field_validator("kms_topic_key_ids", mode="before")
    @classmethod
    def _parse_topic_keys(cls, value: Any) -> Any:
        """``topic=key id`` entries, comma-separated (a key id or ARN has no comma); ``topic@topic-id``
        names a key for one topic id of the name (a re-created topic's earlier incarnation)."""
        if not isinstance(value, str):
            return value
        pairs = []
        for entry in (e.strip() for e in value.split(",")):
            if not entry:
                continue
            topic, sep, key = entry.partition("=")
            if not sep or not topic.strip() or not key.strip():
                raise ValueError(f"{entry!r} is not topic=key-id")
            name, at, topic_id = topic.strip().partition("@")
            validate_topic(name)
            if at and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", topic_id):
                raise ValueError(f"{entry!r}: {topic_id!r} is not a topic id")
            pairs.append((topic.strip(), key.strip()))
        if len({t for t, _ in pairs}) != len(pairs):
            raise ValueError("a topic is listed more than once")
        return tuple(pairs)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.metadata_topic in self.topics:
            raise ValueError("PROCESSOR_TOPICS must not include the metadata topic")
        if self.buffer_bytes < self.segment_bytes:
            raise ValueError(
                f"PROCESSOR_BUFFER_BYTES ({self.buffer_bytes}) must be at least PROCESSOR_SEGMENT_BYTES "
                f"({self.segment_bytes}): a segment is held in the buffer until it is uploaded"
            )
        if self.block_bytes > self.segment_bytes:
            raise ValueError("PROCESSOR_BLOCK_BYTES must not exceed PROCESSOR_SEGMENT_BYTES")
        if self.encryption == "keyring" and self.encryption_keyring is None:
            raise ValueError(
                "PROCESSOR_ENCRYPTION=keyring needs PROCESSOR_ENCRYPTION_KEYRING (a key directory)"
            )
        if self.encryption == "kms" and not self.kms_key_id:
            raise ValueError("PROCESSOR_ENCRYPTION=kms needs PROCESSOR_KMS_KEY_ID")
        if self.metadata_auth != "off" and self.metadata_auth_keys is None:
            raise ValueError(
                f"PROCESSOR_METADATA_AUTH={self.metadata_auth} needs PROCESSOR_METADATA_AUTH_KEYS "
                "(a key directory)"
            )
        if self.s3_sse_kms_key_id and self.s3_sse != "aws:kms":
            raise ValueError("PROCESSOR_S3_SSE_KMS_KEY_ID needs PROCESSOR_S3_SSE=aws:kms")
        for problem in self._storage_problems():
            raise ValueError(problem)
        problems = self.kafka_security.problems()
        if problems:
            raise ValueError("\n  ".join(problems))
        return self

    def _storage_problems(self) -> list[str]:
        """What PROCESSOR_STORAGE=gcs or azure lacks, or credentials that exclude each other."""
        if self.storage == "gcs" and not self.gcs_bucket:
            return ["PROCESSOR_STORAGE=gcs needs PROCESSOR_GCS_BUCKET"]
        if self.storage == "gcs" and self.gcs_anonymous and self.gcs_credentials_file:
            return ["PROCESSOR_GCS_ANONYMOUS and PROCESSOR_GCS_CREDENTIALS_FILE exclude each other"]
        if self.storage != "azure":
            return []
        if not self.azure_container:
            return ["PROCESSOR_STORAGE=azure needs PROCESSOR_AZURE_CONTAINER"]
        given = [
            name
            for name, value in (
                ("PROCESSOR_AZURE_CONNECTION_STRING", self.azure_connection_string),
                ("PROCESSOR_AZURE_ACCOUNT_KEY", self.azure_account_key),
                ("PROCESSOR_AZURE_SAS_TOKEN", self.azure_sas_token),
            )
            if value is not None
        ]
        if len(given) > 1:
            return [f"set one Azure credential, not {' and '.join(given)}"]
        if not self.azure_connection_string and not self.azure_account_url:
            return [
                "PROCESSOR_STORAGE=azure needs PROCESSOR_AZURE_ACCOUNT_URL "
                "(https://ACCOUNT.blob.core.windows.net) or PROCESSOR_AZURE_CONNECTION_STRING"
            ]
        return []

    @functools.cached_property
    def kafka_security(self) -> KafkaSecurity:
        # Each KafkaSecurity field has the setting of the same variable name (ENV_NAMES).
        values = {field: getattr(self, name[len(ENV_PREFIX) :].lower()) for field, name in ENV_NAMES.items()}
        return KafkaSecurity.from_values(values, check=False)

    @property
    def kafka(self) -> KafkaConnection:
        """The cluster and how to reach it: what every Kafka client of the process is built from."""
        return KafkaConnection(self.bootstrap_servers, self.kafka_security)

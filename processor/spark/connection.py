"""Where the Spark sources connect: the Kafka cluster, the metadata topic and the bucket, as a small
frozen value that pickles to the executors (they never read the environment for where to connect),
and the clients built from it. S3 credentials are never options: the standard AWS chain provides
them on every node. The one place a Connection is made from options and settings is
:func:`processor.wiring.spark_connection.spark_connection`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.crypto.providers import key_providers
from processor.kafka.security import KafkaConnection
from processor.reader.segment_keys import SegmentDecryption
from processor.storage.s3 import S3ChunkStorage, s3_storage


@dataclass(frozen=True, slots=True)
class Connection:
    kafka: KafkaConnection  # bootstrap servers and security (kafka.security.protocol, kafka.sasl.*, ...)
    metadata_topic: str
    s3_endpoint: str | None
    s3_bucket: str
    s3_prefix: str
    s3_region: str | None
    # The other kafka.* settings for every Kafka client the sources create (librdkafka names); the
    # security ones are in ``kafka.security``. See kafka_client_settings.
    kafka_settings: tuple[tuple[str, str], ...] = ()
    # Encrypted segments: the key ring directory (on every node) for keyring-wrapped data keys; KMS
    # is reached in s3_region with the node's AWS credentials.
    encryption_keyring: str | None = None
    # PROCESSOR_DATA_DIR of the planning process (None: unset): where its metadata view is kept
    data_dir: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    def storage(self) -> S3ChunkStorage:
        """A new storage client (the caller closes it)."""
        return s3_storage(self.s3_bucket, self.s3_endpoint, self.s3_region, max_concurrency=4)

    def shared_storage(self) -> S3ChunkStorage:
        """One storage client per process and connection, reused by every task a Python worker runs:
        creating a boto3 client costs ~0.1-0.3 s (it loads the service model), more than reading a
        small slice. boto3 clients are thread-safe; it lives as long as the process."""
        return _shared_storage(self)

    def decryption(self) -> SegmentDecryption:
        """One per process and connection (unwrapped data keys are kept for the next task)."""
        return _shared_decryption(self)

    def consumer(self, client_id: str, **extra: Any) -> Any:
        """A new assign-only consumer with this connection's Kafka settings and security (the caller
        closes it)."""
        from processor.kafka.clients import new_consumer

        return new_consumer(self.kafka, client_id, **{**dict(self.kafka_settings), **extra})

    def admin(self, client_id: str) -> Any:
        from processor.kafka.clients import new_admin

        return new_admin(self.kafka, client_id)


@functools.cache
def _shared_storage(conn: Connection) -> S3ChunkStorage:
    return conn.storage()


@functools.cache
def _shared_decryption(conn: Connection) -> SegmentDecryption:
    keyring = Path(conn.encryption_keyring) if conn.encryption_keyring else None
    return SegmentDecryption(key_providers(keyring, conn.s3_region))

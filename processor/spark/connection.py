"""Where the Spark sources connect: the Kafka cluster, the metadata topic and the bucket, as a small
frozen value that pickles to the executors (they never read the environment for where to connect),
and the clients built from it. S3 credentials are never options: the standard AWS chain provides
them on every node. The archive may be on Google Cloud Storage or Azure Blob Storage instead
(``storage_kind``, from ``PROCESSOR_STORAGE``): ``store`` then holds where it is and, for Azure, a
connection string, account key or SAS given in the settings (never shown by ``repr``; it travels to
the executors inside the tasks, as Spark's own ``fs.azure.account.key`` settings do); unset, each
node's own chain provides the credentials (application-default credentials, DefaultAzureCredential).
The one place a Connection is made from options and settings is
:func:`processor.wiring.spark_connection.spark_connection`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processor.crypto.providers import key_providers
from processor.kafka.security import KafkaConnection
from processor.reader.segment_keys import SegmentDecryption
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.s3 import s3_storage


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
    # "s3" (the s3_* fields), "gcs" or "azure": then ``store`` holds the keyword arguments of
    # processor.storage.gcs.gcs_storage or processor.storage.azure.azure_storage, as strings
    storage_kind: str = "s3"
    store: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    def storage(self) -> ChunkStorage:
        """A new storage client (the caller closes it)."""
        if self.storage_kind == "gcs":
            from processor.storage.gcs import gcs_storage

            gcs = dict(self.store)
            anonymous = gcs.pop("anonymous", "") == "true"
            return gcs_storage(**gcs, anonymous=anonymous, max_concurrency=4)
        if self.storage_kind == "azure":
            from processor.storage.azure import azure_storage

            return azure_storage(**dict(self.store), max_concurrency=4)
        return s3_storage(self.s3_bucket, self.s3_endpoint, self.s3_region, max_concurrency=4)

    def shared_storage(self) -> ChunkStorage:
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
def _shared_storage(conn: Connection) -> ChunkStorage:
    return conn.storage()


@functools.cache
def _shared_decryption(conn: Connection) -> SegmentDecryption:
    keyring = Path(conn.encryption_keyring) if conn.encryption_keyring else None
    return SegmentDecryption(key_providers(keyring, conn.s3_region))

"""The Spark sources' Connection, from their options and the settings: each connection option falls
back to the worker's ``PROCESSOR_*`` setting, then its default. The Spark entry point
(processor/spark_sources/entry.py) reads the settings and calls it."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import SecretStr

from processor.config import Settings
from processor.kafka.security import KafkaConnection, KafkaSecurity
from processor.segment.object_keys import validate_prefix, validate_topic
from processor.spark.bounds import option
from processor.spark.connection import Connection
from processor.spark.options import kafka_client_settings


def spark_connection(options: Mapping[str, str], settings: Settings) -> Connection:
    """Connection options, each falling back to the worker's PROCESSOR_* variable, then its default."""
    bucket = option(options, "s3.bucket") or settings.s3_bucket
    # Spark's Kafka-source security options (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*), or
    # else the process's PROCESSOR_* security settings.
    security = KafkaSecurity.from_spark_options(options, settings.kafka_security)
    return Connection(
        kafka=KafkaConnection(
            option(options, "kafka.bootstrap.servers") or settings.bootstrap_servers, security
        ),
        metadata_topic=validate_topic(option(options, "metadata.topic") or settings.metadata_topic),
        s3_endpoint=option(options, "s3.endpoint") or settings.s3_endpoint_url,
        s3_bucket=bucket,
        s3_prefix=validate_prefix(option(options, "s3.prefix") or settings.s3_prefix),
        s3_region=option(options, "s3.region") or settings.s3_region,
        kafka_settings=kafka_client_settings(options),
        encryption_keyring=option(options, "encryption.keyring")
        or (str(settings.encryption_keyring) if settings.encryption_keyring else None),
        storage_kind=settings.storage,
        store=cloud_store(settings),
    )


def cloud_store(settings: Settings) -> tuple[tuple[str, str], ...]:
    """Where a GCS or Azure archive is, and the Azure secret the settings give (see
    processor.spark.connection.Connection.store); empty for S3."""
    if settings.storage == "gcs":
        gcs = {
            "bucket": settings.gcs_bucket,
            "endpoint_url": settings.gcs_endpoint_url,
            "project": settings.gcs_project,
            "credentials_file": str(settings.gcs_credentials_file) if settings.gcs_credentials_file else None,
            "anonymous": "true" if settings.gcs_anonymous else None,
        }
        return tuple((k, v) for k, v in gcs.items() if v)
    if settings.storage == "azure":
        azure = {
            "container": settings.azure_container,
            "account_url": settings.azure_account_url,
            "connection_string": settings.azure_connection_string,
            "account_key": settings.azure_account_key,
            "sas_token": settings.azure_sas_token,
        }
        return tuple(
            (k, v.get_secret_value() if isinstance(v, SecretStr) else v) for k, v in azure.items() if v
        )
    return ()

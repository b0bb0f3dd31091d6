"""The Spark sources' Connection, from their options and the settings: each connection option falls
back to the worker's ``PROCESSOR_*`` setting, then its default. The Spark entry point
(processor/spark/entry.py) reads the settings and calls it."""

from __future__ import annotations

from collections.abc import Mapping

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
    )

"""The Spark sources' Connection, from their options and the settings: each connection option falls
back to the worker's ``PROCESSOR_*`` setting, then its default. The Spark entry point
(processor/spark_sources/entry.py) reads the settings and calls it."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import SecretStr, ValidationError

from processor.config import Settings
from processor.errors import ConfigError
from processor.kafka.security import KafkaConnection, KafkaSecurity
from processor.segment.object_keys import validate_prefix, validate_topic
from processor.spark.bounds import option
from processor.spark.connection import Connection
from processor.spark.options import kafka_client_settings

# Options that choose and place the archive's store, each in place of its PROCESSOR_* setting. A
# cloud store's credentials are never options (options show in Spark's plans and UI): they come from
# the process's settings or the cloud's own chain (application-default credentials, workload identity).
STORE_OPTIONS = {
    "storage": "storage",
    "gcs.bucket": "gcs_bucket",
    "gcs.endpoint": "gcs_endpoint_url",
    "azure.container": "azure_container",
    "azure.accountUrl": "azure_account_url",
}


def with_store_options(options: Mapping[str, str], settings: Settings) -> Settings:
    """``settings`` with the store options given in place of their settings, checked as the settings
    are (a bad value raises ConfigError naming the option)."""
    given = {name: value for name in STORE_OPTIONS if (value := option(options, name)) is not None}
    if not given:
        return settings
    try:
        return Settings.model_validate(
            {**settings.model_dump(), **{STORE_OPTIONS[name]: value for name, value in given.items()}}
        )
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise ConfigError(f"the archive's store options ({', '.join(sorted(given))}): {problems}") from None


def _problem(error: Mapping[str, object]) -> str:
    """One validation error in the options' words: ``storage`` must be ..., or what a store needs
    (the setting named with the option that gives it)."""
    loc = error.get("loc") or ()
    field = str(loc[0]) if isinstance(loc, tuple) and loc else ""
    if field == "storage":
        return f"storage must be s3, gcs or azure (got {error.get('input')!r})"
    text = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    for name, setting in STORE_OPTIONS.items():
        if name == "storage":
            continue  # "PROCESSOR_STORAGE=gcs needs ...": the option's value, as the settings name it
        variable = f"PROCESSOR_{setting.upper()}"
        text = text.replace(variable, f"the option {name} (or {variable})")
    return text


def spark_connection(options: Mapping[str, str], settings: Settings) -> Connection:
    """Connection options, each falling back to the worker's PROCESSOR_* variable, then its default."""
    settings = with_store_options(options, settings)
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

"""The Spark sources' store options: a read names the archive's store (s3, gcs, azure) and where it
is, in place of the process's PROCESSOR_* settings, so one Spark session reads archives on several
stores; a bad value is refused naming the option; credentials never come from options."""

from __future__ import annotations

import pickle

import pytest

from processor.config import load_settings
from processor.errors import ConfigError
from processor.wiring.spark_connection import spark_connection

S3_ENV = {"PROCESSOR_S3_BUCKET": "s3-archive"}


def test_without_store_options_the_settings_decide() -> None:
    conn = spark_connection({}, load_settings(S3_ENV))
    assert conn.storage_kind == "s3" and conn.s3_bucket == "s3-archive" and conn.store == ()


def test_a_read_names_a_gcs_archive_in_its_options() -> None:
    options = {"storage": "gcs", "gcs.bucket": "gcs-archive", "GCS.Endpoint": "http://127.0.0.1:4443"}
    conn = pickle.loads(pickle.dumps(spark_connection(options, load_settings(S3_ENV))))
    assert conn.storage_kind == "gcs"
    assert dict(conn.store)["bucket"] == "gcs-archive"
    assert dict(conn.store)["endpoint_url"] == "http://127.0.0.1:4443"


def test_an_azure_archive_takes_its_credentials_from_the_settings_not_the_options() -> None:
    env = {**S3_ENV, "PROCESSOR_AZURE_CONNECTION_STRING": "AccountName=a;AccountKey=canary;"}
    options = {"storage": "azure", "azure.container": "azure-archive"}
    conn = spark_connection(options, load_settings(env))
    assert conn.storage_kind == "azure" and dict(conn.store)["container"] == "azure-archive"
    assert dict(conn.store)["connection_string"] == "AccountName=a;AccountKey=canary;"
    assert "canary" not in repr(conn)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"storage": "hdfs"}, "storage"),
        ({"storage": "gcs"}, "gcs.bucket"),  # a GCS archive needs its bucket
        ({"storage": "azure"}, "azure.container"),
    ],
)
def test_a_bad_store_option_is_refused_naming_it(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        spark_connection(options, load_settings(S3_ENV))
    assert "store options" in str(refused.value)
    assert named in str(refused.value) or named.split(".")[0] in str(refused.value).lower()

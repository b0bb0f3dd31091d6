"""The archive as Spark data sources (``tiered_records``, ``remote_log_metadata``) and the audit.

The only package that imports pyspark. Executors import it too (classes live in importable
modules, never in ``__main__``), so the package must be installed where executors run.
"""

from __future__ import annotations

from typing import Any

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# The Python data source API the readers need: admission control (latestOffset(start, limit),
# getDefaultReadLimit) and Trigger.AvailableNow came in 4.2. On 4.1 a capped stream could rewind
# after a restart and repeat rows, so older versions are refused rather than read differently.
MIN_PYSPARK = (4, 2)


def require_pyspark(who: str) -> None:
    """Raise ConfigError naming ``who`` and the extra to install where pyspark is missing."""
    from processor.errors import ConfigError

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ConfigError(f"{who} needs pyspark: pip install 'kafka-tiered-processor[spark]'") from None


def active_session() -> Any | None:
    """The SparkSession of the calling program, if it has one (None: none)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def check_pyspark_version(version: str | None = None) -> None:
    """Raise ConfigError unless pyspark (or ``version``) is at least MIN_PYSPARK."""
    import re

    from processor.errors import ConfigError

    if version is None:
        import pyspark

        version = pyspark.__version__
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None or (int(match.group(1)), int(match.group(2))) < MIN_PYSPARK:
        wanted = ".".join(map(str, MIN_PYSPARK))
        raise ConfigError(
            f"pyspark {version} is too old for the tiered_records and remote_log_metadata sources: "
            f"they need pyspark >= {wanted} (admission control and Trigger.AvailableNow for Python "
            f"data sources); pip install 'pyspark>={wanted}'"
        )


def register_data_sources(spark: Any) -> None:
    """Register ``tiered_records`` and ``remote_log_metadata`` on a SparkSession.

    Also turns on Python data source filter pushdown for the session: pyspark refuses to plan a
    reader that implements ``pushFilters`` while that setting is off (its default). Raises
    ConfigError on a pyspark older than MIN_PYSPARK.
    """
    check_pyspark_version()
    from processor.spark.metadata_source import RemoteLogMetadataDataSource
    from processor.spark.tiered_records import TieredRecordsDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(TieredRecordsDataSource)
    spark.dataSource.register(RemoteLogMetadataDataSource)


def local_session(app_name: str, master: str = "local[2]", **conf: str) -> Any:
    """A SparkSession for the processor's own jobs (audit, tests, benchmarks) with both data sources
    registered: Python workers run this interpreter, no UI, no console progress, times in UTC.
    ``conf`` adds Spark settings (dots written as ``__``: ``spark__driver__memory="2g"``)."""
    import os
    import sys

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark


__all__ = ["MIN_PYSPARK", "check_pyspark_version", "local_session", "register_data_sources"]

"""The Spark data sources as Spark starts them: ``tiered_records`` and ``remote_log_metadata``
(data_sources.py, the classes Spark instantiates), the one module that reads their settings
(entry.py: each option falls back to the process's ``PROCESSOR_*`` variables), and the session
helpers that register them. A floor above the wiring: a Spark source is started by Spark, not by a
``processor`` command, so this is its composition root. What the sources read with is
processor/spark/.

Register them on a session::

    from processor.spark_sources import register_data_sources
    register_data_sources(spark)
"""

from __future__ import annotations

from typing import Any

from processor.spark import FILTER_PUSHDOWN_CONF, check_pyspark_version


def register_data_sources(spark: Any) -> None:
    """Register ``tiered_records`` and ``remote_log_metadata`` on a SparkSession.

    Also turns on Python data source filter pushdown for the session: pyspark refuses to plan a
    reader that implements ``pushFilters`` while that setting is off (its default). Raises
    ConfigError on a pyspark older than MIN_PYSPARK.
    """
    check_pyspark_version()
    from processor.spark_sources.data_sources import RemoteLogMetadataDataSource, TieredRecordsDataSource

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


__all__ = ["local_session", "register_data_sources"]

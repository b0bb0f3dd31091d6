"""The archive as Spark data sources (``tiered_records``, ``remote_log_metadata``) and the audit.

The only package that imports pyspark. Executors import it too (classes live in importable
modules, never in ``__main__``), so the package must be installed where executors run.
"""

from __future__ import annotations

from typing import Any

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register_data_sources(spark: Any) -> None:
    """Register ``tiered_records`` and ``remote_log_metadata`` on a SparkSession.

    Also turns on Python data source filter pushdown for the session: pyspark refuses to plan a
    reader that implements ``pushFilters`` while that setting is off (its default).
    """
    from processor.spark.metadata_source import RemoteLogMetadataDataSource
    from processor.spark.tiered_records import TieredRecordsDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(TieredRecordsDataSource)
    spark.dataSource.register(RemoteLogMetadataDataSource)


__all__ = ["register_data_sources"]

"""The classes Spark instantiates for ``spark.read.format("tiered_records")`` and
``format("remote_log_metadata")``: each checks its options, reads the settings they fall back to
(entry.py) and hands the readers of processor/spark/ what they need."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from processor.spark.arrow_records import schema_ddl
from processor.spark.metadata_source import SCHEMA_DDL, MetadataReader, MetadataStreamReader, metadata_options
from processor.spark.options import check_known_options, headers_requested
from processor.spark.tiered_records import TieredRecordsReader
from processor.spark_sources.entry import connection_from, record_options


class TieredRecordsDataSource(DataSource):
    """``spark.read.format("tiered_records")`` / ``spark.readStream.format("tiered_records")``."""

    @classmethod
    def name(cls) -> str:
        return "tiered_records"

    def schema(self) -> str:
        check_known_options(self.options)  # a typo fails at load(), before any query runs
        return schema_ddl(headers_requested(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return TieredRecordsReader(record_options(self.options, mode="batch"))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from processor.spark.tiered_stream import TieredRecordsStreamReader

        return TieredRecordsStreamReader(record_options(self.options, mode="stream"))


class RemoteLogMetadataDataSource(DataSource):
    """``spark.read.format("remote_log_metadata")`` / ``spark.readStream.format(...)``."""

    @classmethod
    def name(cls) -> str:
        return "remote_log_metadata"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return MetadataReader(metadata_options(self.options, lambda: connection_from(self.options)))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MetadataStreamReader(metadata_options(self.options, lambda: connection_from(self.options)))

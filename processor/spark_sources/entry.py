"""The Spark sources' entry point: the one module that reads their settings.

A Spark source is started by Spark, not by a ``processor`` command, so it reads where to connect
here: its options, each falling back to the process's ``PROCESSOR_*`` variables
(:func:`processor.wiring.spark_connection.spark_connection`). Everything below receives the
:class:`~processor.spark.connection.Connection` this builds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from processor.spark.connection import Connection
from processor.spark.options import Mode, RecordOptions, parse_record_options


def connection_from(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Connection:
    """Connection options, each falling back to the worker's PROCESSOR_* variable, then its default."""
    # deferred: executors import the sources' modules (and this one) but never read the settings,
    # and the settings model (pydantic) costs a Python worker ~0.3 s to import
    from processor.config import load_settings
    from processor.wiring.spark_connection import spark_connection

    env = os.environ if environ is None else environ
    conn = spark_connection(options, load_settings(env))
    # planning keeps its metadata view under PROCESSOR_DATA_DIR when that is set (else the temp dir)
    return dataclasses.replace(conn, data_dir=env.get("PROCESSOR_DATA_DIR") or None)


def record_options(
    options: Mapping[str, str], environ: Mapping[str, str] | None = None, mode: Mode = "batch"
) -> RecordOptions:
    """Parse and check ``options`` for a batch or a stream read; raises ConfigError naming what is wrong."""
    return parse_record_options(options, lambda: connection_from(options, environ), mode)

"""What the Spark data sources (``tiered_records``, ``remote_log_metadata``) read with, and the audit:
options, bounds, planning, slices, Arrow batches, streams, the live tail, the metadata view.

The sources themselves (the classes Spark instantiates, and the one module that reads their
settings) are processor/spark_sources/, a floor above the wiring. With it, the only packages that
import pyspark. Executors import both (classes live in importable modules, never in ``__main__``),
so the package must be installed where executors run.
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


__all__ = [
    "FILTER_PUSHDOWN_CONF",
    "MIN_PYSPARK",
    "active_session",
    "check_pyspark_version",
    "require_pyspark",
]

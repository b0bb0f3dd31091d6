"""The names of the environment this package reads: the settings' prefix, the restore target's, and
the ``PROCESSOR_*`` variables that are read though they are no settings (or are not ours)."""

from __future__ import annotations

ENV_PREFIX = "PROCESSOR_"
# The restore's target cluster: each Kafka security variable with this prefix instead
# (processor/commands/restore.py TARGET_ENV_NAMES, derived from ENV_NAMES the same way).
TARGET_PREFIX = "PROCESSOR_TARGET_"
# PROCESSOR_* variables that are not settings yet are read: the test harness's choice of stack
# (tests/conftest.py; inherited by commands the tests run), the local stack's (processor/devstack:
# its broker, that broker's heap, where Maven's jars are cached), and Windows' own, which are not ours.
OTHER_VARIABLES = frozenset(
    {
        "PROCESSOR_TEST_STACK",
        "PROCESSOR_DEV_BROKER",
        "PROCESSOR_DEV_KAFKA_HEAP",
        "PROCESSOR_JARS_CACHE",
        "PROCESSOR_TOOLS_CACHE",
    }
)
FOREIGN_VARIABLES = frozenset(
    {
        "PROCESSOR_ARCHITECTURE",
        "PROCESSOR_ARCHITEW6432",
        "PROCESSOR_IDENTIFIER",
        "PROCESSOR_LEVEL",
        "PROCESSOR_REVISION",
    }
)

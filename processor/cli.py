"""The ``processor`` command: parses arguments and calls the command (processor/commands/). The
commands read the environment (``load_settings``); besides them only the Spark sources' entry point
(processor/spark_sources/entry.py) does.

A command's module is imported only when that command runs (or its ``--help`` is asked for): the
others are listed from :data:`COMMANDS` with their one-line help, so ``processor --help`` and
``processor --version`` import no command, no client library and no settings model.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Collection, Sequence

from processor import __version__
from processor.errors import (
    ConfigError,
    InvalidNameError,
    MetadataTopicError,
    OffsetNotInRemoteError,
    ProcessorError,
    ServiceUnavailableError,
    StorageError,
)

log = logging.getLogger("processor")

# Every command, in the order ``processor --help`` lists them: (name, module, one-line help). The
# module's ``register(sub)`` adds the command's full parser, with this help (tests/unit/test_cli_lazy.py).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("worker", "worker", "run the offload worker against the configured cluster"),
    (
        "dev",
        "dev",
        "the local stack (Apache Kafka or Tansu, and SeaweedFS): up, down, status; env (its settings as "
        "shell exports), produce (sample records), truncate (the broker deletes a topic's records)",
    ),
    ("segments", "segments", "list a topic's remote segments"),
    ("fetch", "fetch", "read records back from remote storage (text, JSON lines, raw, Parquet)"),
    ("demo", "demo", "offload sample records on the embedded stack, then stop everything"),
    ("follower", "follower", "serve remote reads (/fetch, /segments) from the metadata topic; no offload"),
    (
        "gateway",
        "gateway",
        "serve the archive to unmodified Kafka clients (a Kafka-protocol endpoint before the cluster)",
    ),
    (
        "config",
        "config_cmd",
        "print the effective configuration (secrets masked) and where each value came from",
    ),
    (
        "verify",
        "verify",
        "compare a topic's metadata with the bucket: missing, corrupt, unreferenced objects",
    ),
    (
        "audit",
        "audit",
        "scrub the archive: metadata, objects and offsets, as a Spark Structured Streaming query",
    ),
    # lifecycle
    (
        "delete-before",
        "delete_before",
        "delete a partition's remote records below an offset (like Kafka's DeleteRecords)",
    ),
    (
        "delete-topic",
        "delete_topic",
        "delete a topic's remote data: by default the earlier topics of that name the metadata knows "
        "(every history once the topic is gone); refuses while the live topic id cannot be read "
        "(resumable)",
    ),
    ("sweep", "sweep", "delete archived objects no metadata record names (with proof; --dry-run first)"),
    ("abort-multipart", "abort_multipart", "abort abandoned multipart uploads under the prefix"),
    (
        "merge",
        "merge",
        "merge a topic's small adjacent archived segments into bigger ones (resumable; --dry-run first)",
    ),
    (
        "erase",
        "erase",
        "erase records by key from a topic's archived segments (rewrites them; audited; --dry-run first)",
    ),
    ("offload", "offload", "roll and copy a topic's open segments now, wait until copied"),
    # backup
    (
        "restore",
        "restore",
        "restore archived records into a topic (this cluster or another), exactly once",
    ),
    (
        "restore-groups",
        "restore_groups",
        "move consumer group offsets from a source topic to its restored copy",
    ),
    (
        "rebuild-metadata",
        "rebuild_metadata",
        "rebuild the metadata topic from the bucket's segment manifests",
    ),
    (
        "snapshot",
        "snapshot",
        "write a snapshot of the folded metadata to the bucket now (new followers start from it)",
    ),
    # encryption at rest
    ("keyring", "keyring", "manage a local key ring for encryption at rest"),
    ("rekey", "rekey", "re-wrap a topic's data keys under its current key (no data rewritten; resumable)"),
    ("shred", "shred", "crypto-shred a topic: destroy its own key so its archive can never be read again"),
)


class CommandParser(argparse.ArgumentParser):
    """A command's parser: an argument it does not know is a usage error of that command, with its
    own usage (argparse hands unknown arguments up to the top-level parser, whose usage lists the
    commands instead). Nested commands (``dev up``) get this class too."""

    def parse_known_args(  # type: ignore[override]  # argparse's overloads; this one signature
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``processor`` parser. The commands named in ``commands`` (all of them when None) get their
    full parser, which imports their module; the others are listed by name and help only."""
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Tiered storage for Apache Kafka.",
        epilog="exit codes: 0 ok, 1 problems found, 2 bad input (usage, configuration, an offset "
        "not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"processor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for name, module, help_text in COMMANDS:
        if commands is None or name in commands:
            importlib.import_module(f"processor.commands.{module}").register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first argument that is not an option (None: none)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def _error(exc: BaseException) -> None:
    """Report a command's failure: a log record when JSON logging is on (so every line the process
    writes stays JSON), else one plain line on stderr."""
    from processor.logs import json_logging_active

    if json_logging_active():
        log.error("error: %s", exc, extra={"error": type(exc).__name__})
    else:
        print(f"error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes, the same for every command: 0 ok, 1 problems found, 2 bad input (usage,
    configuration, an offset not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_named(argv)
    args = build_parser(() if command is None else (command,)).parse_args(argv)
    # deferred past parsing (with json_logging_active in _error): --help and --version need neither
    from processor.crypto.keys import KeyConfigError
    from processor.runtime import tune_gc

    tune_gc()
    try:
        return int(args.func(args))
    except (ConfigError, KeyConfigError, InvalidNameError, OffsetNotInRemoteError) as exc:
        _error(exc)
        return 2
    except (ServiceUnavailableError, StorageError, MetadataTopicError) as exc:
        _error(exc)
        return 3
    except ProcessorError as exc:
        _error(exc)
        return 1
    except KeyboardInterrupt:
        return 130

"""The ``processor`` command: parses arguments and calls the command (processor/commands/). The
commands are the only code that reads the environment (``load_settings``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from processor import __version__
from processor.commands import (
    abort_multipart,
    config_cmd,
    delete_before,
    delete_topic,
    demo,
    dev,
    fetch,
    follower,
    gateway,
    keyring,
    offload,
    rebuild_metadata,
    rekey,
    restore,
    restore_groups,
    segments,
    shred,
    sweep,
    verify,
    worker,
)
from processor.crypto.keys import KeyConfigError
from processor.errors import (
    ConfigError,
    InvalidNameError,
    MetadataTopicError,
    OffsetNotInRemoteError,
    ProcessorError,
    ServiceUnavailableError,
    StorageError,
)
from processor.logs import json_logging_active
from processor.runtime import tune_gc
from processor.spark.audit_command import add_audit_parser  # imports pyspark only when it runs

log = logging.getLogger("processor")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Tiered storage for Apache Kafka.",
        epilog="exit codes: 0 ok, 1 problems found, 2 bad input (usage, configuration, an offset "
        "not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"processor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for command in (worker, dev, segments, fetch, demo, follower, gateway, config_cmd, verify):
        command.register(sub)
    add_audit_parser(sub)
    for command in (delete_before, delete_topic, sweep, abort_multipart, offload):  # lifecycle
        command.register(sub)
    for command in (restore, restore_groups, rebuild_metadata):  # backup
        command.register(sub)
    for command in (keyring, rekey, shred):  # encryption at rest
        command.register(sub)
    return parser


def _error(exc: BaseException) -> None:
    """Report a command's failure: a log record when JSON logging is on (so every line the process
    writes stays JSON), else one plain line on stderr."""
    if json_logging_active():
        log.error("error: %s", exc, extra={"error": type(exc).__name__})
    else:
        print(f"error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes, the same for every command: 0 ok, 1 problems found, 2 bad input (usage,
    configuration, an offset not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted."""
    args = build_parser().parse_args(argv)
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

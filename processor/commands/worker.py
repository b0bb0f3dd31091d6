"""``processor worker``: run the offload worker against the configured cluster."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from processor.config import Settings, load_settings
from processor.errors import ConfigError
from processor.logs import setup_logging
from processor.wiring.encryption import require_encryption_keys
from processor.wiring.startup import read_api_token, require_topics

# What the worker refuses before it connects to anything (each raises ConfigError: exit 2), in the
# order Worker.build runs them; `processor config --check` runs the same list (config_cmd.py).
START_UP_CHECKS: tuple[Callable[[Settings], object], ...] = (
    require_topics,
    read_api_token,
    require_encryption_keys,
)


def start_up_problems(settings: Settings) -> list[str]:
    """Every problem the worker's start-up validation finds in ``settings`` (empty: it would go on
    to connect), each naming the settings to change."""
    problems = []
    for check in START_UP_CHECKS:
        try:
            check(settings)
        except ConfigError as exc:
            problems.append(str(exc))
    return problems


def validate_start_up(settings: Settings) -> None:
    """ConfigError listing every problem of :func:`start_up_problems`, not only the first."""
    problems = start_up_problems(settings)
    if problems:
        raise ConfigError("the worker cannot start:\n  " + "\n  ".join(problems))


def cmd_worker(args: argparse.Namespace) -> int:
    # faust: imported only by the command that runs it (the other commands start faster without it)
    from processor.wiring.worker import Worker

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)  # first: a JSON log reports the errors too
    validate_start_up(settings)
    return Worker.build(settings).run()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser("worker", help="run the offload worker against the configured cluster")
    worker.set_defaults(func=cmd_worker)

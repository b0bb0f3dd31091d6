"""``processor`` commands run in the test process: ``processor.cli.main(argv)`` with the environment a
child process would get, stdout and stderr captured, and every process-wide setting a command changes
put back afterwards.

A child ``python -m processor`` costs an interpreter start and every import (1-2 s each on a loaded
2-core machine; the suite ran about 55 of them). What the child would see is reproduced: its
environment is this process's without the ``PROCESSOR_*`` variables, then ``env``; an uncaught
exception becomes exit code 1 with the traceback on stderr, as the interpreter would print it; an
``argparse`` exit (usage error, ``--version``) becomes its exit code. The entry points still run as
children where that is what a test is about: the worker (tests/integration/worker_process.py),
``processor demo`` and ``python -m benchmarks`` (their smoke tests), ``processor --version``
(test_cli_ops.py), and a command killed half way (test_deletion_commands.py).

What a command may change and is restored here: ``os.environ`` (``demo`` adds the stack's AWS
variables), the root logger's handlers and level, ``sys.excepthook`` and the warnings hook
(``setup_logging``), the redaction list of the log formatters, and the garbage collector's
thresholds and frozen generation (``tune_gc``).
"""

from __future__ import annotations

import gc
import io
import logging
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from processor import cli
from processor.logs import _Redacting

_LOCK = threading.Lock()  # os.environ and sys.stdout are process-wide: one command at a time


@dataclass(frozen=True)
class CliResult:
    """What ``subprocess.run(..., capture_output=True)`` would have returned."""

    returncode: int
    stdout_bytes: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")


def child_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment without its PROCESSOR_* variables, then ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    base.update(env or {})
    return base


@contextmanager
def _process_state_restored() -> Iterator[None]:
    environ = dict(os.environ)
    handlers, level = list(logging.root.handlers), logging.root.level
    excepthook, showwarning = sys.excepthook, warnings.showwarning
    secrets = list(_Redacting.secrets)
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        for handler in logging.root.handlers:
            if handler not in handlers:
                logging.root.removeHandler(handler)
        for handler in handlers:
            if handler not in logging.root.handlers:
                logging.root.addHandler(handler)
        logging.root.setLevel(level)
        logging.captureWarnings(False)
        sys.excepthook, warnings.showwarning = excepthook, showwarning
        _Redacting.secrets = secrets
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def run_cli(env: Mapping[str, str] | None, *args: str) -> CliResult:
    """Run ``processor ARGS`` in this process, as a child with environment ``env`` would run it."""
    out = io.BytesIO()
    err = io.StringIO()
    with _LOCK, _process_state_restored():
        os.environ.clear()
        os.environ.update(child_environment(env))
        stdout, stderr = sys.stdout, sys.stderr
        # write_through: text and bytes written to sys.stdout.buffer (fetch --format raw) stay in order
        sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        sys.stderr = err
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse: usage errors, --version, --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                err.write(exc.code + "\n")
        except Exception:  # what the interpreter would print for an uncaught exception
            err.write(traceback.format_exc())
            code = 1
        finally:
            sys.stdout.flush()
            sys.stdout.detach()  # leave ``out`` open to read below
            sys.stdout, sys.stderr = stdout, stderr
    return CliResult(code, out.getvalue(), err.getvalue())

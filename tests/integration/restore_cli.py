"""``python -m tests.integration.restore_cli ARGS``: the ``processor`` command with the restore
commands registered, until they are part of processor/cli.py (which moves in the restructure)."""

from __future__ import annotations

import argparse
import sys

import processor.cli as cli
from processor.commands import restore, restore_groups

_build_parser = cli.build_parser


def build_parser() -> argparse.ArgumentParser:
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    restore.add_parser(sub)
    restore_groups.add_parser(sub)
    return parser


if __name__ == "__main__":
    cli.build_parser = build_parser
    sys.exit(cli.main(sys.argv[1:]))

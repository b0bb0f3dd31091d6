"""``processor --help`` and ``--version`` import no command: each command's module is imported when it
runs (or its own ``--help`` is asked for), the others listed from ``cli.COMMANDS``."""

from __future__ import annotations

import argparse
import subprocess
import sys

from processor import cli


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_table_lists_every_command_with_the_help_its_module_gives() -> None:
    full = _subcommands(cli.build_parser())
    listed = [(action.dest, action.help) for action in full._choices_actions]
    assert listed == [(name, help_text) for name, _module, help_text in cli.COMMANDS]


def test_the_lazy_parser_shows_the_same_help_as_the_full_one() -> None:
    assert cli.build_parser(()).format_help() == cli.build_parser().format_help()


def test_a_command_gets_its_full_parser_the_others_stay_unimported() -> None:
    parser = cli.build_parser(("segments",))
    assert _subcommands(parser).choices["segments"].get_default("func") is not None
    assert _subcommands(parser).choices["worker"].get_default("func") is None


def test_help_and_version_import_no_command() -> None:
    script = (
        "import sys\n"
        "from processor import cli\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('processor.commands', 'processor.config', 'confluent_kafka', 'boto3', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip() == "[]", done.stderr

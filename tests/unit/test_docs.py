"""The documentation stays true to the code: README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/.

- every relative link points at a file that exists, and at a heading of it when it has ``#anchor``;
- every ``PROCESSOR_*`` name is a variable the processor reads (processor.config.known_variables),
  a prefix of such variables (``PROCESSOR_SASL_*``), or one of the few named below on purpose;
- the README quick start's ``processor ...`` commands parse with the real argument parser, and every
  ``processor <command>`` the docs name is a command of the CLI;
- the settings table of docs/configuration.md is exactly what the settings model renders
  (``make docs`` rewrites it).
"""

from __future__ import annotations

import argparse
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from processor.cli import build_parser
from processor.commands import config_reference
from processor.config import FOREIGN_VARIABLES, OTHER_VARIABLES, known_variables

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")]
)
# Named in the docs on purpose though no setting: the misspelling the unknown-variable check answers.
ALLOWED_VARIABLES = frozenset({"PROCESSOR_SEGMNT_BYTES"})

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_VARIABLE = re.compile(r"\bPROCESSOR_[A-Z0-9_]*")
_COMMAND = re.compile(r"`processor ([a-z][a-z-]*)")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def split_fences(markdown: str) -> tuple[list[str], list[str]]:
    """(prose lines, fenced code lines) of a markdown text."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    prose, _ = split_fences(path.read_text())
    for line in prose:
        match = _HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def broken_links(path: Path) -> list[str]:
    prose, _ = split_fences(path.read_text())
    text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in prose)  # links inside code spans are text
    out = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            out.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            out.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return out


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_relative_links_point_at_files_and_headings_that_exist(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: yes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#a-code-heading-yes) [self](#page) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope)\n```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading #nope in other.md"]


def unknown_variables(text: str) -> list[str]:
    known = known_variables() | FOREIGN_VARIABLES | ALLOWED_VARIABLES
    out = []
    for name in sorted(set(_VARIABLE.findall(text))):
        if name.endswith("_"):  # a family: PROCESSOR_SASL_*, PROCESSOR_TARGET_, PROCESSOR_*
            if not any(k.startswith(name) for k in known):
                out.append(name + "*")
        elif name not in known:
            out.append(name)
    return out


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_processor_variable_named_is_a_setting(path: Path) -> None:
    assert unknown_variables(path.read_text()) == []


def test_the_variable_check_finds_unknown_names() -> None:
    text = "`PROCESSOR_TOPICS`, `PROCESSOR_SASL_*`, `PROCESSOR_TOPIC`, `PROCESSOR_NOPE_*`, PROCESSOR_LEVEL"
    assert unknown_variables(text) == ["PROCESSOR_NOPE_*", "PROCESSOR_TOPIC"]


@cache
def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the processor parser has no subcommands")


def section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end >= 0 else len(markdown)]


def quick_start_commands() -> list[list[str]]:
    """The ``processor ...`` lines of the README quick start's fenced blocks, as argument lists."""
    _, code = split_fences(section((ROOT / "README.md").read_text(), "## Quick start"))
    out = []
    for line in code:
        if not line.startswith("processor "):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|;&")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        out.append(tokens[1 : tokens.index("|")] if "|" in tokens else tokens[1:])
    return out


def test_the_quick_start_commands_parse() -> None:
    commands = quick_start_commands()
    assert {c[0] for c in commands} >= {"config", "worker", "segments", "fetch"}
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit as exc:  # argparse's way of refusing
            raise AssertionError(f"`processor {' '.join(argv)}` does not parse (exit {exc.code})") from exc


def test_every_command_the_docs_name_exists() -> None:
    known = set(subcommands())
    missing = []
    for path in DOCS:
        prose, code = split_fences(path.read_text())
        named = set(_COMMAND.findall("\n".join(prose)))
        named |= {line.split()[1] for line in code if re.match(r"processor [a-z]", line)}
        missing += [f"{path.relative_to(ROOT)}: processor {n}" for n in sorted(named - known)]
    assert missing == []


def test_the_settings_table_is_generated_from_the_model() -> None:
    assert config_reference.problems() == []
    document = (ROOT / "docs" / "configuration.md").read_text()
    assert config_reference.table_in(document) == config_reference.render_table(), (
        "docs/configuration.md's settings table is out of date: run `make docs`"
    )


def test_every_setting_is_in_the_table_once() -> None:
    table = config_reference.render_table()
    for name in known_variables() - OTHER_VARIABLES:
        if name.startswith("PROCESSOR_TARGET_"):
            continue
        assert table.count(f"| `{name}` |") == 1, name


def test_replacing_the_table_keeps_the_rest(tmp_path: Path) -> None:
    begin, end = config_reference.BEGIN, config_reference.END
    doc = f"# T\n\nbefore\n\n{begin}\nold\n{end}\n\nafter\n"
    new = config_reference.replace_table(doc, "| a |\n")
    assert new == f"# T\n\nbefore\n\n{begin}\n| a |\n{end}\n\nafter\n"
    assert config_reference.table_in(new) == "| a |\n"
    with pytest.raises(ValueError, match="no <!-- settings:begin -->"):
        config_reference.replace_table("no markers", "x")


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) < 250

"""ARCHITECTURE.md's map stays true to the code, so a newcomer's first read does not mislead:

- the package map (the ``processor/`` block of "Layout") names every package of ``processor/`` and
  nothing else, and every module it names at the top level exists;
- its command list is the CLI's (``cli.COMMANDS``);
- the floors diagram ("Floors") holds the same packages on the same floors, in the same order, as the
  ``layers`` contract in pyproject.toml that ``lint-imports`` enforces;
- ``processor/__init__.py``'s package list names every package;
- every file (``x.py``), private function (``_name``) and ``Class.method`` it names in backticks exists.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

from processor.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PROCESSOR = ROOT / "processor"
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()


def packages() -> set[str]:
    return {p.parent.name for p in PROCESSOR.glob("*/__init__.py")}


def fenced_block(markdown: str, first_line: str) -> list[str]:
    """The lines of the fenced block whose first line is ``first_line``."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == first_line and i and lines[i - 1].startswith("```"):
            block: list[str] = []
            for rest in lines[i:]:
                if rest.startswith("```"):
                    return block
                block.append(rest)
    raise AssertionError(f"no fenced block starting {first_line!r} in ARCHITECTURE.md")


def package_map(markdown: str) -> tuple[set[str], set[str], list[str]]:
    """(packages, top-level modules, commands) the ``processor/`` block names."""
    block = fenced_block(markdown, "processor/")
    named = {m.group(1) for line in block if (m := re.match(r"^  ([a-z_]+)/\s", line))}
    modules = {m.group(1) for line in block if (m := re.match(r"^  ([a-z_]+\.py)\s", line))}
    for line in block:
        if line.startswith("  errors.py"):  # the base floor's modules, on one line
            modules |= set(re.findall(r"([a-z_]+\.py)", line))
    text = "\n".join(block)
    listed = re.search(r"commands/\s+one module per command \(([^)]*)\)", text, re.S)
    assert listed is not None, "the commands/ line lists no commands"
    commands = [c.strip() for c in re.split(r",\s*", " ".join(listed.group(1).split()))]
    return named, modules, commands


def floors_diagram(markdown: str) -> list[set[str]]:
    """The floors of the "Floors" diagram, top first, each as the set of names on it."""
    block = fenced_block(
        markdown, next(line for line in markdown.splitlines() if line.startswith("__main__ ->"))
    )
    floors: list[set[str]] = []
    for line in block:
        line = re.sub(r"^\s*->\s*", "", line)
        line = re.sub(r"^[a-z ]+:\s+", "", line)  # "roles:      leader | ..."
        for part in line.split("->"):
            names = {n.strip().removesuffix(".py") for n in re.split(r"[|,]", part) if n.strip()}
            if names:
                floors.append(names)
    return floors


def contract_floors() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c.get("type") == "layers" and c.get("containers") == ["processor"])
    return [{n.strip() for n in re.split(r"[|:]", floor)} for floor in layers["layers"]]


def test_the_package_map_names_every_package_and_nothing_else() -> None:
    named, modules, _ = package_map(ARCHITECTURE)
    assert named == packages(), (
        f"ARCHITECTURE.md's map misses {sorted(packages() - named)} and names {sorted(named - packages())}"
    )
    assert {m for m in modules if not (PROCESSOR / m).is_file()} == set()


def test_the_command_list_is_the_clis() -> None:
    _, _, commands = package_map(ARCHITECTURE)
    assert sorted(commands) == sorted(name for name, _, _ in COMMANDS)


def test_the_floors_diagram_is_the_layers_contract() -> None:
    assert floors_diagram(ARCHITECTURE) == contract_floors()


def test_the_package_docstring_lists_every_package() -> None:
    doc = ast.get_docstring(ast.parse((PROCESSOR / "__init__.py").read_text())) or ""
    listed = set(re.findall(r"^\s+([a-z_]+)/\s", doc, re.M))
    assert listed == packages()


@cache
def _definitions() -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """(every function/class/assigned name in processor/, every (class, method) pair)."""
    names: set[str] = set()
    methods: set[tuple[str, str]] = set()
    for path in PROCESSOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        methods.add((node.name, item.name))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(names), frozenset(methods)


def dangling_references(markdown: str) -> list[str]:
    """What ``markdown`` names in backticks that the tree does not have."""
    names, methods = _definitions()
    files = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    missing = []
    for ref in sorted(set(re.findall(r"`([^`\s]+)`", markdown))):
        if ref.endswith(".py"):
            bare = "/" not in ref and ref in files
            exists = (ROOT / ref).is_file() or (PROCESSOR / ref).is_file() or bare
        elif re.fullmatch(r"_[a-z][a-z0-9_]*", ref):
            exists = ref in names
        elif m := re.fullmatch(r"([A-Z][A-Za-z0-9]+)\.([a-z_][a-z0-9_]*)", ref):
            exists = (m.group(1), m.group(2)) in methods
        else:
            continue
        if not exists:
            missing.append(ref)
    return missing


def test_every_file_function_and_method_named_exists() -> None:
    assert dangling_references(ARCHITECTURE) == []


def test_the_checks_find_drift() -> None:
    drifted = ARCHITECTURE.replace("  rewrite/ ", "  rewritten/ ").replace(", merge, erase,", ",")
    named, _, commands = package_map(drifted)
    assert "rewrite" not in named and "merge" not in commands
    assert dangling_references("`_no_such_function` `SegmentDeleter.no_such` `lifecycle/nothing.py`") == [
        "SegmentDeleter.no_such",
        "_no_such_function",
        "lifecycle/nothing.py",
    ]
    assert floors_diagram("```\n__main__ -> cli\n  -> roles:  leader | gateway\n```") == [
        {"__main__"},
        {"cli"},
        {"leader", "gateway"},
    ]


# A module past this many lines is a sign it mixes jobs (CONTRIBUTING.md): split it by job.
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_size_that_says_it_mixes_jobs() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PROCESSOR.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}

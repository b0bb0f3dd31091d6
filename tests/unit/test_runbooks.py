"""The runbooks (docs/runbooks/) work during an incident: every ``grep`` in their commands matches a
line the code logs, the readiness check prints the reasons of a 503 (``urlopen`` raises on it and
prints nothing), and an alert that aggregates the ``pod`` label away does not send the reader to a
``$POD`` it does not name.

Commands are the runbooks' code: fenced blocks and inline code spans. The log lines are the format
strings of ``log.<level>(...)`` calls in processor/ (an f-string's fields and ``%`` placeholders
become sample values). The alerts are read from the chart's PrometheusRule template as text (no helm
needed: tests/deploy/test_alerts.py renders it and checks the rules themselves).

A grep must also find the failure its alert counts: where the code counts one of the alert's metrics
and logs in the same function, a grep of the page matches one of those lines. ``grep -i 'copy
failed'`` matched only "segment copy failed unexpectedly" (the data path stopping), never the
"copy of N..M failed" lines that TieredStorageCopiesFailing counts.
"""

from __future__ import annotations

import ast
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks"
PAGES = sorted(RUNBOOKS.glob("TieredStorage*.md"))
RULES = ROOT / "helm" / "kafka-tiered-processor" / "templates" / "prometheusrule.yaml"
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}

_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`]+)`")
# A %-placeholder of a logging format string, with the sample value it stands for.
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?([diouxXeEfFgGcrsa%])")
_SAMPLES = {"d": "12", "i": "12", "u": "12", "o": "12", "x": "c", "X": "C", "c": "x", "%": "%"}
_SAMPLES |= dict.fromkeys("eEfFgG", "1.5")


def code_spans(markdown: str) -> list[str]:
    """The commands of a page: its fenced blocks and inline code spans (which may wrap a line)."""
    spans = _FENCED.findall(markdown)
    rest = _FENCED.sub("", markdown)
    spans += [span.replace("\n", " ") for span in _INLINE.findall(rest)]
    return spans


def grep_patterns(command: str) -> list[tuple[str, str]]:
    """``(options, pattern)`` of every ``grep`` in a shell command (quotes honoured, pipes split)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|;&")
    lexer.whitespace_split = True
    tokens = list(lexer)
    out: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        if token not in {"grep", "egrep", "fgrep"}:
            continue
        options = {"egrep": "E", "fgrep": "F"}.get(token, "")
        rest = tokens[i + 1 :]
        while rest and rest[0].startswith("-") and rest[0] not in {"|", "-e"}:
            options += rest.pop(0).lstrip("-")
        if rest and rest[0] == "-e":
            rest.pop(0)
        assert rest and rest[0] not in {"|", ";", "&"}, f"grep without a pattern: {command}"
        out.append((options, rest[0]))
    return out


def grep_regex(options: str, pattern: str) -> re.Pattern[str]:
    """What ``grep OPTIONS PATTERN`` matches, as a Python regex (-F fixed, -E extended, else basic)."""
    flags = re.IGNORECASE if "i" in options else 0
    if "F" in options:
        return re.compile(re.escape(pattern), flags)
    if "E" in options:
        return re.compile(pattern, flags)
    # Basic: ( ) | + ? { } are literal, their backslashed forms are the operators.
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append(nxt if nxt in "()|+?{}" else ch + nxt)
            i += 2
            continue
        out.append("\\" + ch if ch in "()|+?{}" else ch)
        i += 1
    return re.compile("".join(out), flags)


def _rendered(node: ast.expr) -> str | None:
    """A log call's message with sample values for its fields: ``%d`` is 12, ``%s`` a word."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PLACEHOLDER.sub(lambda m: _SAMPLES.get(m.group(1), "topic-0"), node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("topic-0")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _rendered(node.left), _rendered(node.right)
        return None if left is None or right is None else left + right
    return None


def _is_logger(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(re.search(r"log", name, re.IGNORECASE))


def _logged(tree: ast.AST) -> list[str]:
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS
            and _is_logger(node.func.value)
            and node.args
        ):
            line = _rendered(node.args[0])
            if line is not None:
                lines.append(line)
    return lines


@cache
def _modules() -> tuple[ast.Module, ...]:
    return tuple(ast.parse(p.read_text(), str(p)) for p in sorted((ROOT / "processor").rglob("*.py")))


@cache
def log_lines() -> tuple[str, ...]:
    """Every message the package logs (``log.info("...", ...)`` and the like), rendered."""
    return tuple(line for tree in _modules() for line in _logged(tree))


@cache
def metric_variables() -> dict[str, str]:
    """Prometheus name (``processor_..._total`` too for a counter) -> its name in processor.metrics."""
    out = {}
    for node in ast.parse((ROOT / "processor" / "metrics.py").read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            name = str(node.value.args[0].value)
            out[name] = out[name.removesuffix("_total")] = node.targets[0].id
            if isinstance(node.value.func, ast.Name) and node.value.func.id == "Counter":
                out[name.removesuffix("_total") + "_total"] = node.targets[0].id
    return out


@cache
def _functions() -> tuple[tuple[frozenset[str], tuple[str, ...]], ...]:
    """Each function of the package: the ``metrics.<variable>`` it touches, what it logs."""
    out = []
    for tree in _modules():
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                touched = frozenset(
                    n.attr
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "metrics"
                )
                if touched:
                    out.append((touched, tuple(_logged(fn))))
    return tuple(out)


def lines_beside(variables: set[str]) -> list[str]:
    """What the functions that touch ``metrics.<variable>`` log (the failure the metric counts)."""
    return [line for touched, lines in _functions() if touched & variables for line in lines]


def unmatched_patterns(markdown: str) -> list[str]:
    """The grep patterns of a page that match no line the code logs."""
    out = []
    for span in code_spans(markdown):
        if "grep" not in span:
            continue
        for options, pattern in grep_patterns(span):
            regex = grep_regex(options, pattern)
            if not any(regex.search(line) for line in log_lines()):
                out.append(f"grep -{options} {pattern!r}" if options else f"grep {pattern!r}")
    return out


def test_the_log_lines_are_found():
    lines = log_lines()
    assert len(lines) > 100
    assert "topic-0: copy of 12..12 failed (attempt 12): topic-0; retrying in 1.5 s" in lines


def test_the_old_copy_failed_pattern_misses_the_failures_the_alert_counts():
    """What TieredStorageCopiesFailing said before: the lines are "copy of N..M failed (attempt ...)"."""
    counted = lines_beside({"COPY_ERRORS"})
    assert any("copy of 12..12 failed (attempt 12)" in line for line in counted)
    assert not any(grep_regex("i", "copy failed").search(line) for line in counted)
    assert any(grep_regex("E", "copy of [0-9]+\\.\\.[0-9]+ failed").search(line) for line in counted)
    assert unmatched_patterns("`kubectl -n $NS logs $POD | grep -i 'copy of 1..2 fails'`") == [
        "grep -i 'copy of 1..2 fails'"
    ]


def test_grep_patterns_are_read_as_grep_reads_them():
    assert grep_patterns("kubectl logs x --prefix | grep -iE 'a|b' | tail -5") == [("iE", "a|b")]
    assert grep_patterns('kubectl logs x | grep -F "copy of" ') == [("F", "copy of")]
    assert grep_patterns("kubectl logs x | grep -i delet") == [("i", "delet")]
    assert grep_regex("", "a|b(c)").search("a|b(c)")
    assert grep_regex("", "a\\|b").search("b")
    assert not grep_regex("E", "copy of [0-9]+ failed").search("copy of 1..2 failed")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_grep_matches_a_line_the_code_logs(page):
    assert unmatched_patterns(page.read_text()) == [], (
        f"{page.name}: these grep patterns match no log message of processor/"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_readiness_commands_print_the_reasons_of_a_503(page):
    """``urlopen`` raises HTTPError on a 503 and the body (the reasons) is never printed."""
    for span in code_spans(page.read_text()):
        if "urlopen(" in span:
            assert "HTTPError" in span, f"{page.name}: urlopen without handling HTTPError: {span}"


# --- alerts that aggregate the pod label away -------------------------------------------------

_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values|absent)\s*"
    r"(?:(by|without)\s*\(([^)]*)\)\s*)?\("
)
_ALERT = re.compile(r"^\s*- alert: (\w+)\s*\n\s*expr: (.+)$", re.MULTILINE)


def _closing(expr: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced: {expr}")


def keeps_pod(expr: str) -> bool:
    """Whether every aggregation of a PromQL expression keeps the ``pod`` label (``absent`` never
    does; ``by`` may come before or after the argument)."""
    for match in _AGGREGATION.finditer(expr):
        if match.group(1) == "absent":
            return False
        grouping, labels = match.group(2), match.group(3)
        if grouping is None:  # perhaps `sum (...) by (...)`
            after = re.match(r"\s*(by|without)\s*\(([^)]*)\)", expr[_closing(expr, match.end() - 1) + 1 :])
            if after is not None:
                grouping, labels = after.group(1), after.group(2)
        names = {name.strip() for name in (labels or "").split(",")}
        if grouping is None or (grouping == "by") != ("pod" in names):
            return False
    return True


def alert_expressions() -> dict[str, str]:
    return dict(_ALERT.findall(RULES.read_text()))


def test_pod_keeping_is_told_apart():
    assert keeps_pod("sum by (namespace, pod) (rate(x[5m])) > 0")
    assert keeps_pod("up == 0")
    assert not keeps_pod("max by (namespace, topic, partition) (x) > 1 and (max by (namespace, pod) (y))")
    assert not keeps_pod("absent(up{job='a'})")
    assert not keeps_pod("time() - max (x)")
    assert keeps_pod("sum (rate(x[5m])) by (pod)")
    assert not keeps_pod("sum without (pod) (x)")
    alerts = alert_expressions()
    assert len(alerts) >= 16
    assert not keeps_pod(alerts["TieredStorageCopyLagGrowing"])
    assert keeps_pod(alerts["TieredStorageCopiesFailing"])


@pytest.mark.parametrize("alert", sorted(alert_expressions()))
def test_a_runbook_names_no_pod_its_alert_does_not_carry(alert):
    expr = alert_expressions()[alert]
    page = RUNBOOKS / f"{alert}.md"
    assert page.exists(), f"no runbook for {alert}"
    if keeps_pod(expr):
        return
    used = re.findall(r"\$\{?POD\b", page.read_text())
    assert not used, (
        f"{page.name} uses $POD, but {alert} aggregates the pod label away ({expr}): say how to find "
        "the pod (kubectl get pods -l ..., or the pod label of the metric's own series)"
    )


@pytest.mark.parametrize("alert", sorted(alert_expressions()))
def test_a_runbook_greps_for_the_failure_its_alert_counts(alert):
    variables = metric_variables()
    counted = {
        variables[m] for m in re.findall(r"\bprocessor_\w+", alert_expressions()[alert]) if m in variables
    }
    lines = lines_beside(counted)
    page = RUNBOOKS / f"{alert}.md"
    patterns = [p for span in code_spans(page.read_text()) if "grep" in span for p in grep_patterns(span)]
    if not lines or not patterns:
        return
    assert any(grep_regex(o, p).search(line) for o, p in patterns for line in lines), (
        f"{page.name}: no grep of it matches what the code logs where it counts {sorted(counted)}: {lines}"
    )

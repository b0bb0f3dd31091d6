"""The audit's open problems and its scrub position, kept between passes. Pure except load/save.

Each finding is a problem with a key, first and last seen, and a status: ``open`` while passes
keep finding it, ``resolved`` once a pass that looked at its scope (the partition's records, the
archive state, the segment, the object listing, the topic's offsets) no longer does. The scrub
position (which segments the bounded storage checks reached) is kept with it, so both move
together: ``AuditState`` is saved in one atomic write after a pass's findings were written.

A replayed pass (the same pass id again, after a crash) starts from the scrub position the first
attempt started from, so it checks the same segments and rewrites the same findings.

File layout (JSON, version 1)::

    {"v": 1, "pass_id": str|null,
     "cursor_before": {cursor}, "cursor": {cursor},
     "problems": {"<key>": {problem}}}
    cursor: {"after": <last scrub key checked>|null, "cycle": int, "cycle_started_ms": int|null,
             "last_complete_ms": int|null, "checked": int}
    problem: the finding's fields, "severity", "first_seen_ms", "last_seen_ms", "status",
             "resolved_ms"
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from processor.errors import FormatError
from processor.spark.audit.rules import FINDING_COLUMNS, Finding

STATE_VERSION = 1
PROBLEM_COLUMNS = (
    *FINDING_COLUMNS,
    "first_seen_ms",
    "last_seen_ms",
    "status",
    "resolved_ms",
)


@dataclass(frozen=True)
class ScrubCursor:
    after: str | None = None  # the order key of the last segment checked in this cycle
    cycle: int = 0
    cycle_started_ms: int | None = None
    last_complete_ms: int | None = None  # when the last full cycle over every segment ended
    checked: int = 0  # segments checked in this cycle


@dataclass
class Problem:
    key: str
    kind: str
    severity: str
    scope: str
    topic: str | None
    partition: int | None
    start_offset: int | None
    end_offset: int | None
    segment_id: str | None
    object_key: str | None
    detail: str
    first_seen_ms: int
    last_seen_ms: int
    status: str = "open"
    resolved_ms: int | None = None

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in PROBLEM_COLUMNS)


@dataclass
class PassOutcome:
    opened: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)


@dataclass
class AuditState:
    problems: dict[str, Problem] = field(default_factory=dict)
    pass_id: str | None = None
    cursor_before: ScrubCursor = field(default_factory=ScrubCursor)
    cursor: ScrubCursor = field(default_factory=ScrubCursor)

    def start(self, pass_id: str) -> ScrubCursor:
        """Where this pass's scrub starts: where the last one stopped, or, for a replay of the last
        pass, where that one started."""
        return self.cursor_before if pass_id == self.pass_id else self.cursor

    def finish(
        self,
        pass_id: str,
        findings: Iterable[Finding],
        scopes: set[str],
        now_ms: int,
        cursor_before: ScrubCursor,
        cursor_after: ScrubCursor,
    ) -> PassOutcome:
        outcome = PassOutcome()
        found = {f.key: f for f in findings}
        for key, f in found.items():
            known = self.problems.get(key)
            if known is None or known.status != "open":
                outcome.opened.append(key)
                self.problems[key] = Problem(
                    f.key,
                    f.kind,
                    f.severity,
                    f.scope,
                    f.topic,
                    f.partition,
                    f.start_offset,
                    f.end_offset,
                    f.segment_id,
                    f.object_key,
                    f.detail,
                    now_ms,
                    now_ms,
                )
            else:
                self.problems[key] = replace(known, detail=f.detail, last_seen_ms=now_ms)
        for key, problem in self.problems.items():
            if problem.status == "open" and key not in found and problem.scope in scopes:
                problem.status, problem.resolved_ms = "resolved", now_ms
                outcome.resolved.append(key)
        self.pass_id, self.cursor_before, self.cursor = pass_id, cursor_before, cursor_after
        return outcome

    def open_problems(self) -> list[Problem]:
        return sorted((p for p in self.problems.values() if p.status == "open"), key=lambda p: p.key)

    # -- the file -----------------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": STATE_VERSION,
                "pass_id": self.pass_id,
                "cursor_before": asdict(self.cursor_before),
                "cursor": asdict(self.cursor),
                "problems": {k: asdict(p) for k, p in sorted(self.problems.items())},
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> AuditState:
        try:
            doc = json.loads(text)
            if doc.get("v") != STATE_VERSION:
                raise FormatError(f"audit state version {doc.get('v')} is not {STATE_VERSION}")
            return cls(
                problems={k: Problem(**p) for k, p in doc["problems"].items()},
                pass_id=doc["pass_id"],
                cursor_before=ScrubCursor(**doc["cursor_before"]),
                cursor=ScrubCursor(**doc["cursor"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"audit state does not decode: {exc!r}") from exc

    @classmethod
    def load(cls, path: Path) -> AuditState:
        return cls.from_json(path.read_text()) if path.exists() else cls()

    def save(self, path: Path) -> None:
        """Write atomically: a crash leaves the previous state or this one, never half of it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

"""Progress bars for long CLI operations (rich), on stderr and only when stderr is a terminal, so
piped output and logs never carry bar redraws."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class Bar(Protocol):
    def __call__(self, amount: int = 1) -> None:
        """Advance by ``amount``."""

    def set(self, completed: int) -> None:
        """Set the completed count (for progress measured, not counted)."""


def bars_enabled() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(description: str, total: int | None, enabled: bool | None = None) -> Iterator[Bar]:
    """``with progress("verifying", n) as advance: ... advance()``; a no-op when disabled."""
    show = bars_enabled() if enabled is None else enabled
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not show,
        transient=False,
    )
    with bar:
        task = bar.add_task(description, total=total)

        class _Bar:
            def __call__(self, amount: int = 1) -> None:
                bar.advance(task, amount)

            def set(self, completed: int) -> None:
                bar.update(task, completed=completed)

        yield _Bar()

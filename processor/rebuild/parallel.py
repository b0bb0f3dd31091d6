"""Work on a thread pool with a bounded window: results in the order of the input, at most
``window`` items submitted and not yet taken (a listing of millions is never queued at once)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def bounded_map(
    fn: Callable[[T], R], items: Iterable[T], threads: int, window: int, name: str
) -> Iterator[R]:
    """``fn`` of each item, ``threads`` at a time, in the order of ``items``. An error is raised
    here, in order, never lost; the items not started yet are then cancelled."""
    threads = max(1, threads)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name) as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= max(window, threads):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

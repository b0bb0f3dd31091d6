"""Faust's rebalance signals, turned into the leader's ``Leadership`` calls.

A new assignment is claimed after the signal returns, not inside it: claiming costs ~10-15 ms a new
partition (a confirmed claim record and a look at the bucket), and while the signal runs the group
member does not complete its rebalance; a worker taking over a thousand partitions would miss its
session timeout and be dropped, which moves everything again. Claims run on one thread of their
own, one assignment after another in the order they came; fencing by claim epoch makes the delay
safe (a partition is written only under a claim read back). A claim that fails unexpectedly stops
the worker (``Leadership.failure``, watched with the data path's): an assignment must never be left
half claimed silently.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import faust

from processor.kafka.partition import TopicPartition
from processor.leader.leadership import Leadership

log = logging.getLogger(__name__)


def generation(app: faust.App) -> int:
    """The consumer group generation (the writer epoch's floor); 0 before the first assignment."""
    return max(int(getattr(app, "consumer_generation_id", 0) or 0), 0)


def connect_rebalance(app: faust.App, leadership: Leadership, source_topics: frozenset[str]) -> None:
    def _source(tps: Iterable[Any]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition) for tp in tps if tp.topic in source_topics]

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        # The eager protocol revokes everything before every rebalance: what actually leaves is
        # known only with the new assignment (on_assigned). Copies go on meanwhile; a partition
        # that moved is fenced by epoch at its new leader.
        leadership.revoked(_source(args[0] if args else kwargs.get("revoked", ())))

    claims = ThreadPoolExecutor(1, thread_name_prefix="assignment-claims")

    def _claimed(done: Future[None]) -> None:
        exc = done.exception()
        if exc is not None:  # a bug: never a partition left assigned and unclaimed without a word
            log.error("claiming a new assignment failed; stopping the worker", exc_info=exc)
            leadership.failure = exc  # the data path's watch stops the worker

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        tps = _source(args[0] if args else kwargs.get("assigned", ()))
        claims.submit(leadership.assigned, tps, generation(app)).add_done_callback(_claimed)

    # Faust's signal typing does not describe coroutine receivers with extra positionals.
    app.on_partitions_revoked.connect(cast(Any, on_revoked))
    app.on_partitions_assigned.connect(cast(Any, on_assigned))

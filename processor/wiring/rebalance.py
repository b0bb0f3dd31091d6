"""Faust's rebalance signals, turned into the leader's ``Leadership`` calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

import faust

from processor.kafka.partition import TopicPartition
from processor.leader.leadership import Leadership


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

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        tps = _source(args[0] if args else kwargs.get("assigned", ()))
        await asyncio.get_running_loop().run_in_executor(None, leadership.assigned, tps, generation(app))

    # Faust's signal typing does not describe coroutine receivers with extra positionals.
    app.on_partitions_revoked.connect(cast(Any, on_revoked))
    app.on_partitions_assigned.connect(cast(Any, on_assigned))

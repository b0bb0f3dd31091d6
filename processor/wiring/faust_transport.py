"""Faust's transport for the worker: leadership without fetching.

Leadership is Faust's consumer-group assignment of the source partitions. Faust's own consumer
holds the group membership but never fetches source records: its consumer class keeps source
partitions paused, and the agent on the source topics exists only so that Faust subscribes to them.
The records themselves flow through the offload engine (processor/leader/offload_engine.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_kafka


def leadership_transport(source_topics: frozenset[str]) -> type[faust_kafka.Transport]:
    class _LeadershipConsumer(faust_kafka.Consumer):
        """Faust's consumer, except that source partitions are never resumed, so never fetched:
        their assignment marks leadership; the offload engine reads them in batches."""

        def resume_partitions(self, tps: Iterable[Any]) -> None:
            super().resume_partitions([tp for tp in tps if tp.topic not in source_topics])

    class _LeadershipTransport(faust_kafka.Transport):
        Consumer = _LeadershipConsumer

    return _LeadershipTransport


class ProcessorApp(faust.App):
    source_topics: frozenset[str] = frozenset()

    def _new_transport(self) -> Any:
        transport_cls = leadership_transport(self.source_topics)
        return transport_cls(url=self.conf.broker_consumer, app=self, loop=self.loop)

    def on_rebalance_return(self) -> None:
        """Faust's consumer calls this when its assignment callbacks return. With no tables to
        recover, Faust's recovery ends the rebalance (``on_rebalance_end``, which drops the sensors'
        state) while the leadership callback still runs, and Faust then warned "Missing sensor state
        for rebalance #N" on every rebalance. A rebalance that already ended has nothing left for the
        sensors to time: skipped."""
        if not self.rebalancing:
            return
        super().on_rebalance_return()

"""PIP-17's admin-triggered offload (served as ``POST /offload`` by the worker, see
processor/wiring/faust_views.py). For the partitions of T this worker leads, the target is the
source's last offset (high watermark - 1) when the request arrives; open segments are rolled (again,
while records that were already in Kafka keep arriving) until the finished end offset reaches the
target or the time is up.

Answer: ``{"P": {"target": N, "remote_end": M, "done": bool}}``, only partitions this worker leads
(another worker answers for the others). The source's watermarks are asked through a consumer the
caller opens (``open_consumer``; the wiring builds it from the settings).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from processor.kafka.client_types import KafkaTP
from processor.kafka.partition import TopicPartition


def offload_now(
    engine: Any, open_consumer: Callable[[], Any], topic: str, partition: int | None, timeout_s: float
) -> dict[str, dict[str, Any]]:
    led = sorted(tp for tp in engine.status() if tp.topic == topic and partition in (None, tp.partition))
    if not led:
        return {}
    # The target: the source's last offset now. Two estimates, the larger wins: the high watermark
    # the engine saw on its last fetch (remote end + lag), and a ListOffsets query (Tansu can report
    # a lagging high watermark to the latter).
    status = engine.status()
    lag_deadline = time.monotonic() + 5.0  # the engine refreshes its lag every 2 s
    while any(status[tp].lag is None for tp in led if tp in status) and time.monotonic() < lag_deadline:
        time.sleep(0.2)
        status = engine.status()
    led = [tp for tp in led if tp in status]
    consumer = open_consumer()
    try:
        targets = {
            tp: max(
                consumer.get_watermark_offsets(KafkaTP(tp.topic, tp.partition), timeout=10)[1] - 1,
                (status[tp].remote_end if status[tp].remote_end is not None else -1) + (status[tp].lag or 0),
            )
            for tp in led
        }
    finally:
        consumer.close()
    deadline = time.monotonic() + timeout_s

    def ends() -> dict[TopicPartition, int]:
        status = engine.status()
        return {
            tp: (status[tp].remote_end if tp in status and status[tp].remote_end is not None else -1)
            for tp in led
        }

    reached = ends()
    while any(reached[tp] < targets[tp] for tp in led) and time.monotonic() < deadline:
        engine.roll_all()
        time.sleep(0.25)
        reached = ends()
    return {
        str(tp.partition): {
            "target": targets[tp],
            "remote_end": reached[tp],
            "done": reached[tp] >= targets[tp],
        }
        for tp in led
    }

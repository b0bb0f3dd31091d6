"""``POST /offload?topic=T[&partition=P][&timeout_s=S]`` on the worker: PIP-17's admin-triggered
offload. For the partitions of T this worker leads, the target is the source's last offset (high
watermark - 1) when the request arrives; open segments are rolled (again, while records that were
already in Kafka keep arriving) until the finished end offset reaches the target or the time is up.

Answer: ``{"partitions": {"P": {"target": N, "remote_end": M, "done": bool}}}``, only partitions this
worker leads (another worker answers for the others); 400 on bad input; 401 without the bearer
token when PROCESSOR_WEB_TOKEN is set.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust
from confluent_kafka import TopicPartition as KafkaTP
from faust.web import Request, Response, View

from processor.config import Settings
from processor.errors import InvalidNameError
from processor.kafka_clients import new_consumer
from processor.metadata.model import TopicPartition
from processor.segment.object_keys import validate_topic
from processor.web.handlers import authorized

MAX_TIMEOUT_S = 3600.0


def offload_now(
    engine: Any, settings: Settings, topic: str, partition: int | None, timeout_s: float
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
    consumer = new_consumer(settings.bootstrap_servers, f"{settings.worker_id}-offload")
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


def add_offload_view(app: faust.App, engine: Any, settings: Settings) -> None:
    token = settings.web_token.get_secret_value() if settings.web_token else None

    class OffloadView(View):
        async def post(self, request: Request, **kwargs: Any) -> Response:
            denied = authorized(token, request.headers)  # PROCESSOR_WEB_TOKEN guards it like the reads
            if denied is not None:
                assert isinstance(denied.body, dict)
                return self.json(denied.body, status=denied.status, headers=denied.headers)
            try:
                topic = validate_topic(request.query.get("topic", ""))
                raw_partition = request.query.get("partition")
                partition = None if raw_partition is None else int(raw_partition)
                timeout_s = float(request.query.get("timeout_s", "120"))
                if (partition is not None and partition < 0) or not 0 < timeout_s <= MAX_TIMEOUT_S:
                    raise ValueError(f"partition must be >= 0 and timeout_s in (0, {MAX_TIMEOUT_S:.0f}]")
            except (ValueError, InvalidNameError) as exc:
                return self.json({"error": str(exc)}, status=400)
            result = await asyncio.get_running_loop().run_in_executor(
                None, offload_now, engine, settings, topic, partition, timeout_s
            )
            return self.json({"partitions": result})

    app.page("/offload")(OffloadView)

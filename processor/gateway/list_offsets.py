"""ListOffsets: the gateway's own questions to the brokers (their offsets for the partitions it answers
from the archive, kept for a second), and its answers to clients' ListOffsets.

Clients' ListOffsets: EARLIEST (-2) answers the archive's first offset when it is below the broker's; a
timestamp answers the archive's first record at or after it when that comes before the broker's
answer (with ``archived`` reads: whenever the archive holds one); LATEST, MAX_TIMESTAMP and
EARLIEST_LOCAL come from the broker unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from processor.gateway.protocol import (
    Frame,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_schema,
)
from processor.gateway.state import EARLIEST, LATEST, Archive, GatewayState, ReadMode, Send, build
from processor.kafka.api_keys import API_LIST_OFFSETS
from processor.kafka.partition import TopicPartition

log = logging.getLogger(__name__)

BROKER_OFFSETS_TTL_S = 1.0


async def broker_offsets(
    state: GatewayState, tps: list[TopicPartition], isolation: int, header: Any, send: Send
) -> dict[TopicPartition, tuple[int, int, int]]:
    """(high watermark, last stable offset, log start) of each partition, from its broker (ListOffsets).

    A consumer reading the archive fetches many times a second, and these only tell it how far
    behind it is (an archived offset is below all three's earlier values, which only grow): a known
    value is answered at once, and one older than ``BROKER_OFFSETS_TTL_S`` is refreshed in the
    background (a broker's ListOffsets answer can take tens of milliseconds, which every archived
    fetch would otherwise wait for). Only a partition never asked about waits for its broker."""
    now = time.monotonic()
    out: dict[TopicPartition, tuple[int, int, int]] = {}
    unknown, stale = [], []
    for tp in tps:
        cached = state.broker_offsets.get((tp, isolation))
        if cached is None:
            unknown.append(tp)
            continue
        out[tp] = cached[1]
        if now - cached[0] >= BROKER_OFFSETS_TTL_S and (tp, isolation) not in state.refreshing:
            stale.append(tp)
    if stale:
        state.refreshing.update((tp, isolation) for tp in stale)
        task = asyncio.ensure_future(_ask_broker_offsets(state, stale, isolation, header, send))
        task.add_done_callback(lambda t: _refreshed(state, stale, isolation, t))
    if unknown:
        out.update(await _ask_broker_offsets(state, unknown, isolation, header, send))
    return out


def _refreshed(
    state: GatewayState, tps: list[TopicPartition], isolation: int, task: asyncio.Future[Any]
) -> None:
    state.refreshing.difference_update((tp, isolation) for tp in tps)
    if not task.cancelled() and task.exception() is not None:  # the next fetch asks again
        log.info("gateway: refreshing the brokers' offsets failed: %s", task.exception())


async def _ask_broker_offsets(
    state: GatewayState, tps: list[TopicPartition], isolation: int, header: Any, send: Send
) -> dict[TopicPartition, tuple[int, int, int]]:
    asks = [(LATEST, 0), (EARLIEST, 0)] + ([(LATEST, 1)] if isolation == 1 else [])
    answers = await asyncio.gather(*(list_offsets(state, tps, ts, iso, header, send) for ts, iso in asks))
    now = time.monotonic()
    out = {}
    for tp in tps:
        hw, start = answers[0].get(tp, -1), answers[1].get(tp, -1)
        lso = answers[2].get(tp, -1) if isolation == 1 else hw
        out[tp] = (hw, lso, start)
        if hw >= 0:
            state.broker_offsets[(tp, isolation)] = (now, out[tp])
        if start >= 0:
            state.broker_log_start[tp] = start
    return out


async def list_offsets(
    state: GatewayState, tps: list[TopicPartition], timestamp: int, isolation: int, header: Any, send: Send
) -> dict[TopicPartition, int]:
    version = state.list_offsets_version
    schema = request_schema(API_LIST_OFFSETS, version)
    module = __import__(schema.__module__, fromlist=["ListOffsetsTopic"])
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = tuple(
        module.ListOffsetsTopic(
            name=name,
            partitions=tuple(
                build(module.ListOffsetsPartition, partition_index=p, timestamp=timestamp) for p in parts
            ),
        )
        for name, parts in by_topic.items()
    )
    body = build(schema, replica_id=-1, isolation_level=isolation, topics=topics)
    head = schema.__header_schema__
    request = encode_request(
        build(
            head,
            request_api_key=API_LIST_OFFSETS,
            request_api_version=version,
            correlation_id=0,
            client_id=header.client_id,
        ),
        body,
    )
    _corr, answer = decode_response(API_LIST_OFFSETS, version, await send(request))
    out = {}
    for topic in answer.topics:
        for part in topic.partitions:
            if part.error_code == ErrorCode.none:
                out[TopicPartition(topic.name, int(part.partition_index))] = int(part.offset)
    return out


async def answer_list_offsets(frame: bytes, state: GatewayState, archive: Archive, send: Send) -> Frame:
    """Forward the request; then EARLIEST and timestamp answers the archive can improve on."""
    header, body = decode_request(frame)
    version = int(header.request_api_version)
    raw = await send(frame)
    asked = {(t.name, int(p.partition_index)): int(p.timestamp) for t in body.topics for p in t.partitions}
    if not any(ts == EARLIEST or ts >= 0 for ts in asked.values()):
        return raw
    corr, answer = decode_response(API_LIST_OFFSETS, version, raw)
    changed = False
    topics = []
    for topic in answer.topics:
        parts = []
        for part in topic.partitions:
            ts = asked.get((topic.name, int(part.partition_index)))
            tp = TopicPartition(topic.name, int(part.partition_index))
            better = None
            if part.error_code == ErrorCode.none and ts == EARLIEST:
                first = await asyncio.to_thread(archive.first_offset, tp)
                if first is not None and first < int(part.offset):
                    better = (first, -1)
            elif part.error_code == ErrorCode.none and ts is not None and ts >= 0:
                found = await asyncio.to_thread(archive.offset_for_timestamp, tp, ts)
                # archived reads: the archive's time index answers for what it holds; below-log-start:
                # only where it finds an earlier record than the broker does
                if found is not None and (
                    state.mode == ReadMode.ARCHIVED or int(part.offset) < 0 or found[0] < int(part.offset)
                ):
                    better = found
            if better is not None:
                part = replace(part, offset=better[0], timestamp=better[1])
                changed = True
            parts.append(part)
        topics.append(replace(topic, partitions=tuple(parts)))
    if not changed:
        return raw
    return encode_response(corr, replace(answer, topics=tuple(topics)))

"""Fetch answers that come (in part) from the archive.

Fetch: for each partition of a client's fetch, the archive answers when it holds the fetch offset and
the mode says so (``archived``: every archived offset; ``below-log-start``: offsets the broker no
longer has), with the archived record batches as they are (base offsets, CRCs), at least one batch
and then whole batches within the partition's and the response's byte limits. The broker answers
the rest: one upstream Fetch with the other partitions, sessionless (the gateway owns the client's
fetch session: it always answers ``session_id`` 0, so a client keeps sending full fetches, and the
broker never holds a session for partitions the archive answered). The high watermark and last
stable offset of an archive-answered partition are the broker's (ListOffsets LATEST on the same
upstream connection, with the client's isolation level), its log start offset the archive's.

Every partition a client asks for is in the answer: the gateway never holds a fetch session, so
each fetch is a full one, and a client checks a full answer names every partition it asked for (Java
and kafka-python drop an answer that does not, records and all, and fetch the same offsets again). A
broker may leave out of its answer a partition it has nothing for (Tansu does): such a partition is
answered empty, without error, with the broker's offsets, as Apache Kafka answers it.

Transactions: the archive holds what a read_committed consumer sees (the workers fetch read_committed
and leave out aborted records and transaction markers, processor/segment/read_committed.py), so an
archived range has no aborted transaction to list: a read_committed client gets an empty list, and
a read_uncommitted one sees the committed records only (a broker would also show it the aborted ones).
Archived offsets are below the last stable offset by construction.

ListOffsets answers, and the brokers' offsets the gateway asks for itself: list_offsets.py.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from processor import metrics
from processor.gateway.fetch_access import (
    learn_unknown_topic_ids,
    may_read,
    sessionless,
    topic_key,
    topic_name,
    topic_name_of,
)
from processor.gateway.fetch_walk import BrokerPartition, fetch_partitions
from processor.gateway.list_offsets import broker_offsets, list_offsets
from processor.gateway.protocol import (
    Answer,
    Frame,
    ProtocolError,
    RecordsRef,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_chunks,
    response_schema,
)
from processor.gateway.state import EARLIEST, Archive, GatewayState, ReadMode, Send, build
from processor.kafka.api_keys import API_FETCH
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches
from processor.segment.entries_v2 import count_records

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 57_671_680  # Kafka's default fetch.max.bytes (55 MiB)


async def answer_fetch(
    frame: bytes,
    state: GatewayState,
    archive: Archive,
    send: Send,
    own_send: Send | None = None,
    access: dict[TopicPartition, float] | None = None,
) -> Answer:
    """The answer to a client's Fetch. With ``below-log-start`` reads, a partition the broker answers
    OFFSET_OUT_OF_RANGE for teaches the gateway that broker's log start (ListOffsets EARLIEST), and
    the fetch is answered again: the offsets below it that the archive holds come from the archive."""
    header, body = decode_request(frame)
    version = int(header.request_api_version)
    fetched = await _answer_fetch(frame, header, body, state, archive, send, own_send, access)
    answer = fetched.answer
    try:
        broker_part = _broker_part(fetched, version)
    except ProtocolError as exc:
        if state.mode == ReadMode.BELOW_LOG_START:
            raise  # its errors must be read: an out-of-range answer would reset the client
        # with archived reads the broker's own answer passes on as it is, only not counted
        log.warning("gateway: a broker's Fetch answer not counted (not readable): %s", exc)
        metrics.GATEWAY_ERRORS.labels(str(API_FETCH), "broker_answer_not_counted").inc()
        return answer
    if broker_part is None:
        return answer  # the archive answered every partition: no broker answer to look at
    _count_broker_bytes(state, broker_part, version)
    asked = {}
    for topic in body.topics:
        name = topic_name(state, topic, version)
        for part in topic.partitions:
            if name is not None:
                asked[(name, int(part.partition))] = int(part.fetch_offset)
    lost = []
    for bp in broker_part:
        name = topic_name_of(state, bp.topic, version)
        if name is not None and bp.error_code == ErrorCode.offset_out_of_range.value:
            lost.append(TopicPartition(name, bp.partition))
    if not lost:
        return answer
    starts = await list_offsets(state, lost, EARLIEST, 0, header, own_send or send)
    state.broker_log_start.update(starts)
    if state.mode != ReadMode.BELOW_LOG_START:
        # With archived reads, a partition the archive did not answer (its read failed, or the
        # follower has not applied its segment yet) went to the broker. Below the broker's log start
        # at an offset the archive should hold, OFFSET_OUT_OF_RANGE would make the client reset past
        # the archive: answered again, those partitions get KAFKA_STORAGE_ERROR, which clients retry.
        # Out of range above the log's end, or below the archive's start, stays the broker's answer.
        held = await _held_offsets(archive, asked, starts)
        if not held:
            return answer
        log.warning(
            "gateway: %s below the brokers' log start, not answered by the archive: retried", sorted(held)
        )
        metrics.GATEWAY_ERRORS.labels(str(API_FETCH), "archive_held").inc(len(held))
        again = await _answer_fetch(frame, header, body, state, archive, send, own_send, access, held)
        if (again_part := _broker_part(again, version)) is not None:
            _count_broker_bytes(state, again_part, version)
        return again.answer
    if any(asked.get((tp.topic, tp.partition), -1) < start for tp, start in starts.items()):
        again = await _answer_fetch(frame, header, body, state, archive, send, own_send, access)
        if (again_part := _broker_part(again, version)) is not None:
            _count_broker_bytes(state, again_part, version)
        return again.answer
    return answer


async def _held_offsets(
    archive: Archive, asked: dict[tuple[str, int], int], starts: dict[TopicPartition, int]
) -> frozenset[TopicPartition]:
    """The partitions asked below their broker's log start at an offset the archive should hold."""
    held = set()
    for tp, start in starts.items():
        offset = asked.get((tp.topic, tp.partition), -1)
        if 0 <= offset < start and await _archive_should_hold(archive, tp, offset):
            held.add(tp)
    return frozenset(held)


def _broker_part(fetched: _Fetched, version: int) -> list[BrokerPartition] | None:
    """The partitions of a Fetch answer the broker answered (None: the archive answered every one).
    An answer passed on as it is is walked, its records left where they are (not decoded)."""
    if fetched.walked is not None:
        return fetched.walked
    if fetched.upstream is not None:
        return [
            BrokerPartition(topic_key(t, version), int(p.partition_index), int(p.error_code), p.records)
            for t in fetched.upstream.responses
            for p in t.partitions
        ]
    if not isinstance(fetched.answer, list):  # the broker's answer, passed on as it is
        return fetch_partitions(fetched.answer, version)
    return None


def _count_broker_bytes(state: GatewayState, parts: list[BrokerPartition], version: int) -> None:
    by_topic: dict[str, list[bytes | memoryview]] = {}
    for bp in parts:
        name = topic_name_of(state, bp.topic, version)
        if name is not None and bp.records:
            by_topic.setdefault(name, []).append(bp.records)
    for name, sets in by_topic.items():
        state.served(name, "broker", sum(map(count_records, sets)), sum(map(len, sets)))


@dataclass(frozen=True, slots=True)
class _Fetched:
    answer: Answer
    upstream: Any = None  # the broker's part of the answer, decoded (None: not decoded, or none)
    walked: list[BrokerPartition] | None = None  # a broker's answer passed on, its partitions walked


def _omitted(body: Any, version: int, answered: set[tuple[Any, int]]) -> list[tuple[int, int]]:
    """The partitions of the client's fetch (topic index, partition index) an answer naming
    ``answered`` (topic key, partition) leaves out."""
    return [
        (ti, pi)
        for ti, topic in enumerate(body.topics)
        for pi, part in enumerate(topic.partitions)
        if (topic_key(topic, version), int(part.partition)) not in answered
    ]


async def _every_partition(
    answer: Frame, header: Any, body: Any, state: GatewayState, send: Send
) -> _Fetched:
    """The broker's answer to the client's fetch, passed on as it is when it names every partition
    asked for (walked, not decoded); else decoded, with those it left out answered empty."""
    version = int(header.request_api_version)
    try:
        walked = fetch_partitions(answer, version)
    except ProtocolError:
        return _Fetched(answer)  # answer_fetch walks it again and says what to do
    omitted = _omitted(body, version, {(bp.topic, bp.partition) for bp in walked})
    if not omitted:
        return _Fetched(answer, walked=walked)
    try:
        corr, upstream = decode_response(API_FETCH, version, answer)
    except ProtocolError as exc:  # kio cannot read it: passed on as it is, as any broker answer is
        log.warning(
            "gateway: a broker's Fetch answer leaves out %d partitions and cannot be decoded: %s",
            len(omitted),
            exc,
        )
        return _Fetched(answer, walked=walked)
    if upstream.error_code != ErrorCode.none:  # an error for the whole fetch names no partition
        return _Fetched(answer, walked=walked)
    schema = response_schema(API_FETCH, version)
    module = __import__(schema.__module__, fromlist=["PartitionData"])
    topics = list(upstream.responses)
    await _add_empty(topics, module, omitted, header, body, state, send)
    return _Fetched(encode_response(corr, replace(upstream, responses=tuple(topics))), upstream)


async def _add_empty(
    topics: list[Any],
    module: Any,
    omitted: list[tuple[int, int]],
    header: Any,
    body: Any,
    state: GatewayState,
    send: Send,
) -> None:
    """Answer each of ``omitted`` (partitions a broker left out of its answer) empty, without error,
    with its broker's offsets (as Apache Kafka answers a partition it has nothing new for)."""
    version = int(header.request_api_version)
    isolation = int(getattr(body, "isolation_level", 0))
    key_field = "topic" if version < 13 else "topic_id"
    named = {}
    for ti, pi in omitted:
        name = topic_name(state, body.topics[ti], version)
        if name is not None:
            named[(ti, pi)] = TopicPartition(name, int(body.topics[ti].partitions[pi].partition))
    offsets = await broker_offsets(state, list(dict.fromkeys(named.values())), isolation, header, send)
    log.debug(
        "gateway: partitions %s left out of a broker's Fetch answer: answered empty", sorted(named.values())
    )
    for ti, pi in omitted:
        tp = named.get((ti, pi))
        hw, lso, start = offsets.get(tp, (-1, -1, -1)) if tp is not None else (-1, -1, -1)
        part = _partition_data(
            module, body.topics[ti].partitions[pi].partition, (hw, lso, start), isolation, b""
        )
        _add_partition(topics, module, key_field, getattr(body.topics[ti], key_field), part)


def _partition_data(
    module: Any, partition: Any, offsets: tuple[int, int, int], isolation: int, records: object
) -> Any:
    """One partition of a Fetch answer without error: its broker's high watermark, last stable offset
    (read_committed) and log start offset ``offsets``, and ``records``."""
    hw, lso, start = offsets
    return build(
        module.PartitionData,
        partition_index=partition,
        error_code=ErrorCode.none,
        high_watermark=hw,
        last_stable_offset=lso if isolation == 1 else hw,
        log_start_offset=start,
        aborted_transactions=() if isolation == 1 else None,
        preferred_read_replica=-1,
        records=records,
    )


async def _answer_fetch(
    frame: bytes,
    header: Any,
    body: Any,
    state: GatewayState,
    archive: Archive,
    send: Send,
    own_send: Send | None = None,
    access: dict[TopicPartition, float] | None = None,
    hold: frozenset[TopicPartition] = frozenset(),
) -> _Fetched:
    """``frame``'s answer; ``header`` and ``body``: the frame decoded (once, by answer_fetch)."""
    version = int(header.request_api_version)
    isolation = int(getattr(body, "isolation_level", 0))
    # a broker caps a response at its fetch.max.bytes whatever the client asks: so does the gateway
    budget = min(int(getattr(body, "max_bytes", 2**31 - 1)), MAX_RESPONSE_BYTES)
    if version >= 13:
        await learn_unknown_topic_ids(state, [t.topic_id for t in body.topics], header, send)
    served: dict[tuple[int, int], tuple[TopicPartition, ArchivedBatches]] = {}
    failed: dict[tuple[int, int], TopicPartition] = {}
    # Which partitions the archive may answer, each with its byte limit within the response's (in
    # request order, as a broker fills a response); their reads then run at once.
    planned: list[tuple[int, int, TopicPartition, int, int, str | None]] = []
    left = budget
    for ti, topic in enumerate(body.topics):
        name = topic_name(state, topic, version)
        if name is None:
            continue
        # the topic id the brokers know the topic by: a re-created topic's archive is another's
        topic_id = topic.topic_id if version >= 13 else state.topic_ids.get(name)
        for pi, part in enumerate(topic.partitions):
            tp = TopicPartition(name, int(part.partition))
            offset = int(part.fetch_offset)
            if tp in hold:  # the archive should answer it and did not: a retriable error
                failed[(ti, pi)] = tp
                continue
            if state.mode == ReadMode.BELOW_LOG_START and offset >= state.broker_log_start.get(tp, -1):
                continue
            if left <= 0 and planned:
                break
            limit = max(1, min(int(part.partition_max_bytes), left))
            left -= limit
            planned.append((ti, pi, tp, offset, limit, None if topic_id is None else str(topic_id)))
    if state.check_access and planned:
        allowed = await may_read(
            [(ti, pi, tp) for ti, pi, tp, *_rest in planned],
            body,
            header,
            send,
            {} if access is None else access,
        )
        planned = [p for p in planned if p[2] in allowed]
    reads = await asyncio.gather(
        *(
            _read_archive(state, archive, tp, offset, limit, tid)
            for _ti, _pi, tp, offset, limit, tid in planned
        ),
        return_exceptions=True,
    )
    for (ti, pi, tp, offset, _limit, _tid), got in zip(planned, reads, strict=True):
        if isinstance(got, BaseException):  # a storage failure or a damaged object: this partition only
            log.warning("gateway: archive read of %s at offset %d failed: %s", tp, offset, got)
            metrics.GATEWAY_ERRORS.labels(str(API_FETCH), "archive").inc()
            if state.mode == ReadMode.BELOW_LOG_START:
                failed[(ti, pi)] = tp  # the broker no longer has it: a retriable error, never a reset
            continue
        if got is None or not got.batches:
            if state.mode == ReadMode.BELOW_LOG_START and await _archive_should_hold(archive, tp, offset):
                # below the broker's log start and not below the archive's: the follower has not
                # applied it yet, or a copy in flight covers it (a lost range no copy covers is
                # answered from the next segment: reader/lost_ranges). The broker would answer
                # OFFSET_OUT_OF_RANGE and the client would reset past the archive; a retriable error
                # keeps it here.
                log.warning(
                    "gateway: %s offset %d is below the broker's log start, not yet in the archive",
                    tp,
                    offset,
                )
                metrics.GATEWAY_ERRORS.labels(str(API_FETCH), "not_in_archive_yet").inc()
                failed[(ti, pi)] = tp
            continue
        served[(ti, pi)] = (tp, got)
        budget -= got.size
    if not served and not failed and int(getattr(body, "session_epoch", -1)) == -1:
        # nothing for the archive, and already sessionless: unchanged (unless the broker left out a
        # partition asked for)
        return await _every_partition(await send(frame), header, body, state, own_send or send)
    rest_topics = []
    for ti, topic in enumerate(body.topics):
        parts = tuple(
            p for pi, p in enumerate(topic.partitions) if (ti, pi) not in served and (ti, pi) not in failed
        )
        if parts:
            rest_topics.append(replace(topic, partitions=parts))
    upstream: Any = None
    fetched: asyncio.Task[Frame] | None = None
    if rest_topics or not (served or failed):
        rest = sessionless(body, tuple(rest_topics), max(1, budget) if served else None)
        fetched = asyncio.ensure_future(send(encode_request(header, rest)))
    try:
        broker = await broker_offsets(
            state, [tp for tp, _ in served.values()], isolation, header, own_send or send
        )
    finally:
        answer = await fetched if fetched is not None else None
    if answer is not None:
        if not (served or failed):  # only made sessionless: the broker's answer as it is
            return await _every_partition(answer, header, body, state, own_send or send)
        _corr, upstream = decode_response(API_FETCH, version, answer)
    schema = response_schema(API_FETCH, version)
    module = __import__(schema.__module__, fromlist=["PartitionData"])
    topics: list[Any] = list(upstream.responses) if upstream is not None else []
    key_field = "topic" if version < 13 else "topic_id"
    # The archive's first offsets, here on the event loop: two seeks in the follower's local cache
    # each. Sent to the read threads, busy reading ahead, they waited a free thread (measured: the
    # p90 of building an archived answer fell from 38 ms).
    firsts = [archive.first_offset(tp) for tp, _ in served.values()]
    for ((ti, pi), (tp, got)), archive_start in zip(served.items(), firsts, strict=True):
        hw, lso, start = broker.get(tp, (-1, -1, -1))
        if archive_start is not None and (start < 0 or archive_start < start):
            start = archive_start
        # the records written to the socket from where the archive read them
        records = RecordsRef(got.batches)
        part = _partition_data(
            module, body.topics[ti].partitions[pi].partition, (hw, lso, start), isolation, records
        )
        state.served(tp.topic, "archive", sum(map(count_records, got.batches)), got.size)
        _add_partition(topics, module, key_field, getattr(body.topics[ti], key_field), part)
    for ti, pi in failed:
        part = build(
            module.PartitionData,
            partition_index=body.topics[ti].partitions[pi].partition,
            error_code=ErrorCode.kafka_storage_error,  # retriable: the client fetches again
            high_watermark=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=None,
        )
        _add_partition(topics, module, key_field, getattr(body.topics[ti], key_field), part)
    if upstream is None or upstream.error_code == ErrorCode.none:
        answered = {(getattr(t, key_field), int(p.partition_index)) for t in topics for p in t.partitions}
        omitted = _omitted(body, version, answered)
        if omitted:
            await _add_empty(topics, module, omitted, header, body, state, own_send or send)
    response = build(
        schema,
        throttle_time=upstream.throttle_time if upstream is not None else datetime.timedelta(0),
        error_code=upstream.error_code if upstream is not None else ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
    )
    return _Fetched(encode_response_chunks(int(header.correlation_id), response), upstream)


async def _archive_should_hold(archive: Archive, tp: TopicPartition, offset: int) -> bool:
    first = await asyncio.to_thread(archive.first_offset, tp)
    return first is not None and offset >= first


async def _read_archive(
    state: GatewayState, archive: Archive, tp: TopicPartition, offset: int, limit: int, topic_id: str | None
) -> ArchivedBatches | None:
    if state.prefetch is not None:
        return await state.prefetch.get(tp, offset, limit, topic_id)
    return await asyncio.to_thread(archive.read_batches, tp, offset, limit, topic_id)


def _add_partition(topics: list[Any], module: Any, key_field: str, key_value: Any, part: Any) -> None:
    for i, existing in enumerate(topics):
        if getattr(existing, key_field) == key_value:
            topics[i] = replace(existing, partitions=(*existing.partitions, part))
            return
    topics.append(build(module.FetchableTopicResponse, **{key_field: key_value}, partitions=(part,)))

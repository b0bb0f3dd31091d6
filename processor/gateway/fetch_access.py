"""How a Fetch names its topics, and which partitions a client may read from the archive.

A Fetch names a topic by name, or from version 13 by topic id: the gateway learns ids and names from
the Metadata answers it passes on (:func:`learn_topic_ids`) and asks upstream for an id none named yet.
With SASL passed through, the archive answers a partition only once the client's broker, asked with
the client's own identity, would let it fetch there (:func:`may_read`).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from processor.gateway.protocol import decode_response, encode_request, request_schema
from processor.gateway.state import GatewayState, Send
from processor.kafka.api_keys import API_FETCH, API_METADATA
from processor.kafka.partition import TopicPartition

ACCESS_TTL_S = 60.0


async def may_read(
    parts: list[tuple[int, int, TopicPartition]],
    body: Any,
    header: Any,
    send: Send,
    access: dict[TopicPartition, float],
) -> set[TopicPartition]:
    """The partitions this client may read, asked of its broker with its own identity (SASL passed
    through): the archive answers only what the broker would let it fetch. One Fetch of the partitions
    not known yet on this connection (one byte each, no wait): a partition the broker answers with an
    authorization error (for it, or for the whole request) is left to the broker, whose answer the
    client gets. Known for
    ``ACCESS_TTL_S`` on this connection (a revoked ACL counts from the next check)."""
    now = time.monotonic()
    allowed = {tp for _ti, _pi, tp in parts if access.get(tp, 0.0) > now}
    ask = [(ti, pi, tp) for ti, pi, tp in parts if tp not in allowed]
    if not ask:
        return allowed
    topics = []
    for ti in dict.fromkeys(ti for ti, _pi, _tp in ask):
        topic = body.topics[ti]
        wanted = {pi for t, pi, _tp in ask if t == ti}
        partitions = tuple(
            replace(p, partition_max_bytes=1) for pi, p in enumerate(topic.partitions) if pi in wanted
        )
        topics.append(replace(topic, partitions=partitions))
    probe = sessionless(body, tuple(topics), 1)
    probe = replace(probe, min_bytes=0, max_wait=datetime.timedelta(0))
    version = int(header.request_api_version)
    _corr, answer = decode_response(API_FETCH, version, await send(encode_request(header, probe)))
    refusals = {ErrorCode.topic_authorization_failed, ErrorCode.cluster_authorization_failed}
    refused: set[TopicPartition] = set()
    if answer.error_code in refusals:
        refused = {tp for _ti, _pi, tp in ask}
    for topic in answer.responses:
        key = topic_key(topic, version)
        for part in topic.partitions:
            if part.error_code in refusals:
                refused |= {
                    tp
                    for ti, _pi, tp in ask
                    if topic_key(body.topics[ti], version) == key
                    and tp.partition == int(part.partition_index)
                }
    # Only an explicit refusal denies: a broker may leave out of its answer a partition it has
    # nothing for (Tansu does), and Kafka names every partition it refuses.
    for _ti, _pi, tp in ask:
        if tp not in refused:
            access[tp] = now + ACCESS_TTL_S
            allowed.add(tp)
    return allowed


def topic_key(topic: Any, version: int) -> Any:
    """How a Fetch names a topic: by name, or from version 13 by topic id."""
    return topic.topic if version < 13 else topic.topic_id


def topic_name(state: GatewayState, topic: Any, version: int) -> str | None:
    """The name of a Fetch request's or response's topic (None: an id no Metadata answer named)."""
    return topic_name_of(state, topic_key(topic, version), version)


def topic_name_of(state: GatewayState, key: Any, version: int) -> str | None:
    """The name of a topic a Fetch names by ``key``: its name, or from version 13 its id."""
    if version < 13:
        return str(key)
    return None if key is None else state.topic_names.get(key)


async def learn_unknown_topic_ids(state: GatewayState, ids: list[Any], header: Any, send: Send) -> None:
    """Names of topic ids no Metadata answer through this gateway has named yet (a client that
    reconnected after a gateway restart fetches by id at once): one Metadata request upstream."""
    unknown = [i for i in dict.fromkeys(ids) if i is not None and i not in state.topic_names]
    if not unknown:
        return
    schema = request_schema(API_METADATA, 12)
    module = __import__(schema.__module__, fromlist=["MetadataRequestTopic"])
    body = schema(
        topics=tuple(module.MetadataRequestTopic(topic_id=i, name=None) for i in unknown),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    head = schema.__header_schema__(
        request_api_key=API_METADATA, request_api_version=12, correlation_id=0, client_id=header.client_id
    )
    _corr, answer = decode_response(API_METADATA, 12, await send(encode_request(head, body)))
    learn_topic_ids(state, answer)


def learn_topic_ids(state: GatewayState, body: Any) -> None:
    """Topic ids and names from a Metadata answer (versions 10 and later carry ids)."""
    for topic in body.topics:
        topic_id = getattr(topic, "topic_id", None)
        if topic_id is not None and topic.name and int(topic.error_code) == 0 and topic_id.int != 0:
            state.topic_names[topic_id] = topic.name
            state.topic_ids[topic.name] = topic_id


def sessionless(body: Any, topics: tuple[Any, ...], max_bytes: int | None) -> Any:
    """The client's fetch for ``topics`` only, without a session. ``max_bytes`` set: the archive
    already answers part of the response, so the broker must not wait for more (``max_wait`` 0): a
    broker answers at once once it has records for any partition, and the archive's count. Waiting
    for the broker's own min_bytes added fetch.wait.max.ms to every archived answer."""
    values: dict[str, Any] = {"topics": topics, "forgotten_topics_data": ()}
    names = {f.name for f in dataclasses.fields(type(body))}
    if "session_id" in names:
        values.update(session_id=0, session_epoch=-1)
    if max_bytes is not None:
        values["max_wait"] = datetime.timedelta(0)
        if "max_bytes" in names:
            values["max_bytes"] = min(int(body.max_bytes), max_bytes)
    return replace(body, **{k: v for k, v in values.items() if k in names})

"""Building the metadata model's frozen values from fields already of their types, without the
frozen constructor's per-field ``object.__setattr__`` (which cost more than reading the fields): the
fast readers of the metadata topic (:mod:`processor.metadata.segment_metadata_decoder`,
:mod:`processor.metadata.segment_batch_decoder`) make every record through these. Pure."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, shared_topic_partition

# The model's generated __init__ (frozen) sets each of its 18 fields through object.__setattr__, which
# cost more than reading them. Values read here are already of the fields' types, so they go straight
# into the slots; __post_init__ still checks them as the constructor would.
_NEW = object.__new__
_SLOT_SETTERS = tuple(
    getattr(RemoteLogSegmentMetadata, f.name).__set__ for f in dataclasses.fields(RemoteLogSegmentMetadata)
)


def _slot_builder() -> Callable[..., RemoteLogSegmentMetadata]:
    """A function of every field's value, positionally, that sets them slot by slot: one setter call
    a field written out (generated from the dataclass's fields, as dataclasses generates __init__),
    not a loop whose steps cost as much as the calls."""
    names = [f"v{i}" for i in range(len(_SLOT_SETTERS))]
    sets = "".join(f"    s{i}(meta, {name})\n" for i, name in enumerate(names))
    source = (
        f"def build({', '.join(names)}):\n    meta = new(cls)\n{sets}"
        "    meta.__post_init__()\n    return meta\n"
    )
    namespace: dict[str, Any] = {"new": _NEW, "cls": RemoteLogSegmentMetadata}
    namespace.update({f"s{i}": set_slot for i, set_slot in enumerate(_SLOT_SETTERS)})
    exec(source, namespace)
    build: Callable[..., RemoteLogSegmentMetadata] = namespace["build"]
    return build


build_record = _slot_builder()


_ID_SETTERS = tuple(
    getattr(RemoteLogSegmentId, f.name).__set__ for f in dataclasses.fields(RemoteLogSegmentId)
)
_ID_FIELDS = tuple(f.name for f in dataclasses.fields(RemoteLogSegmentId))
assert _ID_FIELDS == ("topic", "partition", "id", "topic_id", "topic_partition"), _ID_FIELDS
_set_topic, _set_partition, _set_id, _set_topic_id, _set_tp = _ID_SETTERS
_topic_partition = shared_topic_partition


def build_segment_id(topic: str, partition: int, sid: uuid.UUID, topic_id: str | None) -> RemoteLogSegmentId:
    """RemoteLogSegmentId(topic, partition, sid, topic_id) slot by slot, as the frozen __init__ and
    its __post_init__ would set them (a new segment's first record makes one)."""
    segment_id = _NEW(RemoteLogSegmentId)
    _set_topic(segment_id, topic)
    _set_partition(segment_id, partition)
    _set_id(segment_id, sid)
    _set_topic_id(segment_id, topic_id)
    _set_tp(segment_id, _topic_partition(topic, partition))
    return segment_id


_UUID = uuid.UUID
_UUID_SETATTR = object.__setattr__
_UUID_UNKNOWN = uuid.SafeUUID.unknown


def uuid_of_text(text: str) -> uuid.UUID:
    """uuid.UUID(text) of a canonical lower-case UUID string (matched by UUID_TEXT first), set as
    its __init__ sets it (``int`` and ``is_safe``) without its parsing of every other form."""
    value = _NEW(_UUID)
    _UUID_SETATTR(value, "int", int(text.replace("-", ""), 16))
    _UUID_SETATTR(value, "is_safe", _UUID_UNKNOWN)
    return value


def _segment_metadata(*values: Any) -> RemoteLogSegmentMetadata:
    """RemoteLogSegmentMetadata(*values), all fields given positionally, without __init__'s setattrs."""
    if len(values) != len(_SLOT_SETTERS):
        raise ValueError(f"{len(values)} values for {len(_SLOT_SETTERS)} fields")
    return build_record(*values)

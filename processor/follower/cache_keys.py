"""The follower cache's key layout and value encodings (RocksDB via rocksdict, in raw mode). Pure.

Key layout (binary; ``tp`` is ``topic utf-8, 0x00, partition u32 BE``; offsets and timestamps are
u64/i64 BE so byte order is numeric order)::

    b"S" uuid(16)                      -> the segment's latest metadata (codec.encode_value bytes), kept
                                          after DELETE_SEGMENT_FINISHED until the key's tombstone
    b"O" tp start(u64) uuid(16)        -> [end i64][max_timestamp i64]   COPY_SEGMENT_FINISHED only
    b"L" tp start(u64) uuid(16)        -> [end i64]                      all but DELETE_SEGMENT_FINISHED
    b"E" tp                            -> the fold's partition header: current claim, topic ids, remote
                                          log start offset, delete state (JSON, partition_header_codec)
    b"H" tp metadata-key               -> b""   a key whose latest record was rejected (shadowed)
    b"X" tp uuid(16)                   -> a rejected record of a segment no accepted record knows
                                          (an orphan: its objects and key are the owner's to remove)
    b"C" metadata_partition(u32)       -> [next offset to consume i64]
    b"V"                               -> [cache layout version u16]
    b"M"                               -> the metadata topic the cache was built from: its name and
                                          topic id (utf-8, ``name/id``); another one's cache is rebuilt

``O`` holds only the finished segments that are *served*, as :mod:`processor.metadata.fold` (the one
fold every reader applies) decides. Layout 1 (before claims) kept the partition's lineage, start
offset and delete state under ``E``, ``B`` and ``P``; layout 2's headers did not keep the highest
claim epoch seen (a zombie's old claim stated again after a release is rejected by it); a cache of an
older layout is rebuilt from the topic when opened (it is derived data).

"The finished segment containing offset O of tp" is one ``seek_for_prev`` on ``O tp O ff..``;
"segments of tp from offset O" is a forward scan from the same place. Neither scans the cache.
"""

from __future__ import annotations

import functools
import struct
import uuid

from processor.kafka.partition import TopicPartition

CACHE_VERSION = 3
U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
O_VALUE = struct.Struct(">qq")  # end, max_timestamp
VERSION_KEY = b"V"
ORIGIN_KEY = b"M"
MAX_UUID = b"\xff" * 16


@functools.lru_cache(maxsize=65536)
def tp_key(tp: TopicPartition) -> bytes:
    return tp.topic.encode() + b"\x00" + U32.pack(tp.partition)


def tp_of_key(raw: bytes) -> TopicPartition:
    """The partition of a key's ``tp`` part (``raw`` starts with it)."""
    sep = raw.index(b"\x00")
    return TopicPartition(raw[:sep].decode(), U32.unpack(raw[sep + 1 : sep + 5])[0])


def offset_key(prefix: bytes, tp: TopicPartition, start: int, sid: uuid.UUID | None) -> bytes:
    return prefix + tp_key(tp) + U64.pack(start) + (sid.bytes if sid else MAX_UUID)

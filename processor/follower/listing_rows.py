"""The rows of a segment listing (``processor segments``) read straight from the cache's stored bytes:
no RemoteLogSegmentMetadata is built for a segment whose stored record is plain and within bounds.

Why: building the model of every listed segment (the one-record reader, its checks, the dataclass)
cost ~30-40 us of the ~45 us a segment the listing took, about 4 s for a topic of 100,000 segments.
Here the ``S`` values of the listed segments are walked all at once with numpy (a column of positions,
one field of every record a step: a few array operations a field, whatever the number of records) and
the rows are made from the columns; a listing of 100,000 segments spends most of its time in
RocksDB's reads and in the interpreter's formatting of the rows, not in decoding.

Options weighed: the compiled walk of :mod:`processor.metadata.segment_batch_kernel` (numba) costs
~0.55 CPU-seconds of numba's import in a process that has not loaded it (a CLI call), half of the 1 s
a listing of 100,000 segments may take; the one-record reader in Python is the cost this removes.
numpy is imported in ~0.1 s and walks 100,000 records in a few tens of milliseconds.

Not a second definition of the format: the walk follows ``EXPECTED_LAYOUT`` of
:mod:`processor.metadata.segment_metadata_decoder` (the layout the fast readers are written for,
checked against the schema file by ``enabled``) field by field, and the fields a record written by an
earlier schema lacks are those the schema files in ``schemas/history/`` lack. Like those readers it
accepts the plain encoding only (one positive array block, union and enum indexes in range,
booleans 0/1, varints of 64 bits at most, no trailing bytes); the bounds of
:mod:`processor.metadata.validation` are checked on the columns (its constants and, for names and
object keys, its own functions). Any value it does not accept, for whatever reason, is decoded by the
model path as before (``decode_value``): that path decides it, with the same row or the same error,
in the same order (tests/unit/test_listing_rows.py compares both on generated and corrupted caches).
Pure: the caller reads the bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from processor.metadata import validation
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.segment_metadata_decoder import EXPECTED_LAYOUT

# numpy arrays (numpy is imported where a listing is read, not with the follower: typed loosely)
Ints = Any

# One row of the listing: the fields of the read API's segment JSON, in its order
# (processor.reader.record_json.SEGMENT_JSON_FIELDS names them).
Row = tuple[str, str, int, int, int, str, int, int, int, str, int, str | None, str, str]

# The framing of a stored segment record (codec: framing version 1, record type 0).
_FRAME = b"\x01\x00"
_MAX_ITEMS = 64  # an array of more items than this (leader epochs): the model path reads it (rare)


def model_row(segment: RemoteLogSegmentMetadata) -> Row:
    """The row of a decoded segment record (the model path)."""
    sid = segment.segment_id
    return (
        str(sid.id),
        sid.topic,
        sid.partition,
        segment.start_offset,
        segment.end_offset,
        segment.state.value,
        segment.segment_size_in_bytes,
        segment.record_count,
        segment.max_timestamp_ms,
        segment.writer_id,
        segment.writer_epoch,
        sid.topic_id,
        segment.data_object_key,
        segment.index_object_key,
    )


def rows_of_values(
    values: Sequence[bytes | None], decode: Callable[[bytes], RemoteLogSegmentMetadata]
) -> list[Row]:
    """The row of each stored ``S`` value in order (None: no record, no row). Values this module
    reads are turned into rows from the bytes; the others through ``decode`` (the model path, which
    raises its error for a value that is not a valid segment record)."""
    present = [v for v in values if v is not None]
    fast = _fast_rows(present) if present else []
    out: list[Row] = []
    append = out.append
    for value, row in zip(present, fast, strict=True):
        append(row if row is not None else model_row(decode(value)))
    return out


# -- the walk ------------------------------------------------------------------------------------


class _Walk:
    """The positions of every record (``p``, relative to the joined buffer), whether each is still
    read plainly (``ok``), and the columns the listing needs: a span (start, end) for each string or
    bytes field, a value for each number, enum and boolean, an item count for each array (-1 for a
    null union branch's span, or a field absent from an older record)."""

    def __init__(self, buf: Any, starts: Ints, ends: Ints) -> None:
        import numpy as np

        self.np = np
        self.buf = buf
        self.end = ends
        self.p = starts + len(_FRAME)
        self.ok = np.ones(len(starts), bool)
        self.columns: dict[str, Any] = {}

    def fail(self, idx: Ints, bad: Any) -> None:
        """Mark the records ``idx[bad]`` unread and park them at their end (gathers stay in range)."""
        gone = idx[bad]
        self.ok[gone] = False
        self.p[gone] = self.end[gone]

    def varint(self, idx: Ints) -> Ints:
        """The zig-zag longs at ``p[idx]`` (Avro int and long alike, as the fast readers read them);
        64 bits at most (a 10th byte above 1 is refused); past the record's end is refused."""
        np = self.np
        p = self.p[idx]
        b = self.buf[p].astype(np.uint64)
        n = b & np.uint64(0x7F)
        nxt = p + 1
        todo = np.flatnonzero(b >= 0x80)
        q = nxt[todo]
        shift = 7
        while todo.size:
            b = self.buf[q].astype(np.uint64)
            q = q + 1
            if shift == 63:  # a 10th byte: 0 or 1 only, and the last
                n[todo] |= b << np.uint64(63)
                nxt[todo] = q
                big = np.zeros(len(idx), bool)
                big[todo[b > 1]] = True
                self.fail(idx, big)
                break
            n[todo] |= (b & np.uint64(0x7F)) << np.uint64(shift)
            more = b >= 0x80
            nxt[todo[~more]] = q[~more]
            todo, q = todo[more], q[more]
            shift += 7
        value = (n >> np.uint64(1)).astype(np.int64) ^ -(n & np.uint64(1)).astype(np.int64)
        past = nxt > self.end[idx]
        self.p[idx] = np.where(past, self.end[idx], nxt)
        self.fail(idx, past)
        return value

    def byte(self, idx: Ints) -> Ints:
        """The byte at ``p[idx]`` (a union or enum index, a boolean), -1 past the record's end."""
        np = self.np
        p = self.p[idx]
        past = p >= self.end[idx]
        b = np.where(past, -1, self.buf[p].astype(np.int64))
        self.p[idx] = np.where(past, p, p + 1)
        self.fail(idx, past)
        return b

    def span(self, idx: Ints) -> tuple[Ints, Ints]:
        """The (first byte, end) of the strings or bytes at ``p[idx]``."""
        np = self.np
        n = self.varint(idx)
        a = self.p[idx]
        bad = (n < 0) | (n > self.end[idx] - a)
        b = np.where(bad, a, a + n)
        self.p[idx] = b
        self.fail(idx, bad)
        return a, b

    def column(self, name: str, count: int, fill: int = -1) -> Ints:
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = self.np.full(count, fill, self.np.int64)
        return col

    def read(self, name: str, kind: Any, idx: Ints) -> None:
        """Read one field of layout ``kind`` at ``p[idx]`` into the columns named after ``name``."""
        np = self.np
        idx = idx[self.ok[idx]]
        count = len(self.ok)
        if kind in ("long", "int"):
            self.column(name, count)[idx] = self.varint(idx)
        elif kind in ("string", "bytes", ("string", "uuid")):
            a, b = self.span(idx)  # ("string", "uuid"): its text is checked with the row
            self.column(name + ".a", count)[idx] = a
            self.column(name + ".b", count)[idx] = b
        elif kind == "boolean":
            b = self.byte(idx)
            self.fail(idx, b > 1)
            self.column(name, count)[idx] = b
        elif kind[0] == "enum" or kind in _NAMED:
            symbols = kind[1] if kind[0] == "enum" else _NAMED[kind][1]
            b = self.byte(idx)
            self.fail(idx, (b < 0) | (b & 1 == 1) | (b >= 2 * len(symbols)))
            self.column(name, count)[idx] = b >> 1
        elif kind[0] == "record":
            for field, field_kind in kind[1]:
                self.read(f"{name}.{field}" if name else field, field_kind, idx)
        elif kind[0] == "array":
            n = self.varint(idx)  # one positive block of items, then the 0 that ends it (or only 0)
            bad = (n < 0) | (n > _MAX_ITEMS)
            self.fail(idx, bad)
            self.column(name + ".count", count, 0)[idx] = np.where(bad, 0, n)
            more = idx[(n > 0) & ~bad]
            items = n[(n > 0) & ~bad]
            for k in range(int(items.max()) if items.size else 0):
                self.read(name + ".item", kind[1], more[items > k])
            more = more[self.ok[more]]
            self.fail(more, self.byte(more) != 0)
        elif len(kind) == 2 and kind[0] == "null":  # a union of null and one type
            b = self.byte(idx)
            self.fail(idx, (b != 0) & (b != 2))
            self.read(name, kind[1], idx[b == 2])
        else:
            raise AssertionError(f"the listing cannot read a field of type {kind!r}")


_FIELDS: tuple[tuple[str, Any], ...] = EXPECTED_LAYOUT[1]
_STATE_SYMBOLS: tuple[str, ...] = dict(_FIELDS)["state"][1]
# Named types the layout refers to by name: ``replaces_state`` names the state's enum (the layout
# keeps no names; the schema file names that enum so, and ``enabled`` checks the layout)
_NAMED: dict[str, Any] = {"RemoteLogSegmentState": dict(_FIELDS)["state"]}


@cache
def _optional_from() -> int | None:
    """How many leading fields every readable record has: the fields of the oldest schema in
    ``schemas/history/`` (each later schema appended fields with defaults); the rest may be absent.
    None when an earlier schema is not such a prefix of the current one: then this module reads
    nothing and the model path reads every value."""
    from processor.metadata import codec, segment_metadata_decoder

    fewest = len(_FIELDS)
    for name in codec._SCHEMA_HISTORY[codec.TYPE_SEGMENT]:
        text = (codec.schema_dir() / "history" / name).read_text(encoding="utf-8")
        fields = segment_metadata_decoder.layout(json.loads(text))[1]
        if tuple(fields) != _FIELDS[: len(fields)]:
            return None
        fewest = min(fewest, len(fields))
    return fewest


@cache
def _enabled() -> bool:
    """Whether the schema file has the layout the walk follows (the fast reader's own check) and
    every earlier schema is a prefix of it."""
    from processor.metadata import codec

    return codec._segment_metadata_decoder_enabled() and _optional_from() is not None


def _walk(values: list[bytes]) -> _Walk:
    import numpy as np

    count = len(values)
    lengths = np.fromiter(map(len, values), np.int64, count)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # spare zero bytes around the values: a varint's bytes are gathered before its end is checked,
    # and a key's name is read back from its end
    buf = np.frombuffer(bytes(_PAD) + b"".join(values) + bytes(_PAD), np.uint8)
    starts += _PAD
    ends += _PAD
    walk = _Walk(buf, starts, ends)
    walk.fail(np.arange(count), (lengths < 2) | (buf[starts] != 1) | (buf[np.minimum(starts + 1, ends)] != 0))
    everyone = np.arange(count)
    optional_from = _optional_from() or len(_FIELDS)
    for i, (name, kind) in enumerate(_FIELDS):
        active = everyone[walk.ok]
        if i >= optional_from:  # records that end here were written before this field existed
            active = active[walk.p[active] < ends[active]]
        walk.read(name, kind, active)
    walk.fail(everyone, walk.p != ends)
    return walk


_PAD = 128  # zero bytes before the values (windows read back from a key's end) and after them


def _windows(buf: Any, width: int) -> Any:
    """Every ``width`` bytes of ``buf`` as a row (a view): ``_windows(buf, w)[starts]`` copies the
    spans at ``starts`` with one index a span, not one a byte."""
    import numpy as np

    return np.lib.stride_tricks.sliding_window_view(buf, width)


def _by_length(np: Any, a: Ints, b: Ints) -> Any:
    """(length, rows) of the spans [a, b) for each distinct length above 0."""
    lengths = b - a
    for length in np.unique(lengths).tolist():
        if length > 0:
            yield length, np.flatnonzero(lengths == length)


def _printable(np: Any, buf: Any, a: Ints, b: Ints) -> Any:
    """Per span [a, b): whether all its bytes are printable ASCII (empty: True)."""
    out = np.ones(len(a), bool)
    for length, rows in _by_length(np, a, b):
        block = _windows(buf, length)[a[rows]]
        out[rows] = ((block >= 0x20) & (block < 0x7F)).all(axis=1)
    return out


def _same_as_previous(np: Any, buf: Any, a: Ints, b: Ints) -> Any:
    """Per row: whether the bytes [a, b) equal the previous row's (the first row: False)."""
    lengths = b - a
    same = np.zeros(len(a), bool)
    same[1:] = lengths[1:] == lengths[:-1]
    rows = np.flatnonzero(same)
    for length, of in _by_length(np, a[rows], b[rows]):
        at = rows[of]
        view = _windows(buf, length)
        same[at] = (view[a[at]] == view[a[at - 1]]).all(axis=1)
    return same


def _ascii_strings(np: Any, buf: Any, a: Ints, b: Ints) -> list[str]:
    """The spans [a, b) of printable ASCII (the caller checked) as str: the spans of one length
    copied out by numpy and decoded as one string, then cut (no Python step a byte)."""
    out = [""] * len(a)
    for length, rows in _by_length(np, a, b):
        text = _windows(buf, length)[a[rows]].tobytes().decode("ascii")
        cut = [text[k : k + length] for k in range(0, len(text), length)]
        if len(rows) == len(a):
            return cut
        for r, string in zip(rows.tolist(), cut, strict=True):
            out[r] = string
    return out


def _where(np: Any, condition: Any, a: Ints, b: Ints) -> Ints:
    return np.where(condition, a, b)


def _text(value: bytes, columns: dict[str, Any], name: str, i: int, base: int) -> str:
    """The string ``name`` of row ``i`` (its value starts at ``base`` of the joined buffer)."""
    return value[int(columns[name + ".a"][i]) - base : int(columns[name + ".b"][i]) - base].decode()


def _fast_rows(values: list[bytes]) -> list[Row | None]:
    """The row of each value read here, None where the model path must decide."""
    if not _enabled():
        return [None] * len(values)
    import numpy as np

    n = len(values)
    walk = _walk(values)
    c, ok, buf = walk.columns, walk.ok, walk.buf
    # The bounds of validation.check_segment and the model's own checks, on the columns; a record
    # outside them goes to the model path, which raises the error naming the field.
    start, end, count = c["start_offset"], c["end_offset"], c["record_count"]
    ok &= (start >= 0) & (start <= end) & (end <= validation.MAX_OFFSET)
    ok &= (count >= 0) & (count <= end - start + 1)
    for size in (c["segment_size_in_bytes"], c["index_size_in_bytes"]):
        ok &= (size >= 0) & (size <= validation.MAX_SIZE)
    ok &= (c["index_crc32"] >= 0) & (c["index_crc32"] < 2**32)
    ok &= np.isin(c["segment_format_version"], sorted(validation.SEGMENT_FORMAT_VERSIONS))
    ok &= (c["writer_epoch"] >= -1) & (c["writer_epoch"] <= validation.MAX_EPOCH)
    ok &= c["writer_id.b"] - c["writer_id.a"] <= validation.MAX_WRITER_ID  # bytes >= characters
    epochs = c["segment_leader_epochs.count"]
    ok &= (epochs > 0) & (epochs <= validation.MAX_LEADER_EPOCHS)
    ok &= c["custom_metadata.b"] - c["custom_metadata.a"] <= validation.MAX_CUSTOM_METADATA
    replaces = c["replaces_state"]
    deletable = [_STATE_SYMBOLS.index(s) for s in ("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED")]
    ok &= (replaces == -1) | (
        (c["state"] == _STATE_SYMBOLS.index("DELETE_SEGMENT_STARTED")) & np.isin(replaces, deletable)
    )
    ok &= c["supersedes.count"] == 0  # a rewrite's record (rare): the model path checks its ids

    def span(name: str) -> tuple[Ints, Ints]:
        """A string column's spans; empty ones (at 0) for the rows no longer read here."""
        a = np.where(ok, c[name + ".a"], 0)
        return a, np.where(ok, c[name + ".b"], a)

    # The segment id's text: a canonical lower-case UUID (segment_metadata_decoder.UUID_TEXT).
    sid_a, sid_b = span("segment_id.id")
    ok &= sid_b - sid_a == 36
    sid = _windows(buf, 36)[np.where(ok, sid_a, 0)]
    hyphen = np.isin(np.arange(36), (8, 13, 18, 23))
    hexdigit = ((sid >= ord("0")) & (sid <= ord("9"))) | ((sid >= ord("a")) & (sid <= ord("f")))
    ok &= np.where(hyphen, sid == ord("-"), hexdigit).all(axis=1)
    # The object keys (validation._key_problem): printable ASCII (its bytes are its characters), the
    # index key the data key + "-index", and the data key's name exactly ``{start:020d}-{id}-e{n}.log``
    # after a "/" (read back from the key's end).
    data_a, data_b = span("data_object_key")
    index_a, index_b = span("index_object_key")
    length = data_b - data_a
    ok &= (length > 0) & (length <= validation.MAX_OBJECT_KEY - 6) & (index_b - index_a == length + 6)
    ok &= length >= 1 + 20 + 1 + 36 + 2 + 1 + 4  # "/", the name's parts, one digit at least
    data_b = _where(np, ok, data_b, data_a)
    index_b = _where(np, ok, index_b, index_a)
    ok &= _printable(np, buf, data_a, data_b)
    for length_, rows in _by_length(np, data_a, data_b):
        view = _windows(buf, length_)
        ok[rows] &= (view[data_a[rows]] == view[index_a[rows]]).all(axis=1)
    ok &= (_windows(buf, 6)[index_b - 6] == np.frombuffer(b"-index", np.uint8)).all(axis=1)
    tail = _windows(buf, 25)[np.where(ok, data_b, _PAD) - 25]  # up to 21 digits, then ".log"
    ok &= (tail[:, 21:] == np.frombuffer(b".log", np.uint8)).all(axis=1)
    isdigit = (tail[:, :21] >= ord("0")) & (tail[:, :21] <= ord("9"))
    digits = np.cumprod(isdigit[:, ::-1], axis=1).sum(axis=1)  # the epoch's, before ".log"
    mark = data_b - 4 - digits - 2  # its "-e"
    ok &= (digits >= 1) & (digits <= 20) & (mark - 58 >= data_a)
    name = _windows(buf, 60)[np.where(ok, mark - 58, 0)]  # "/", 20 digits, "-", the id, "-e"
    ok &= (name[:, 0] == ord("/")) & (name[:, 21] == ord("-")) & (name[:, 58] == ord("-"))
    ok &= (name[:, 59] == ord("e")) & (name[:, 22:58] == sid).all(axis=1)
    offset = name[:, 1:21].astype(np.int64) - ord("0")
    ok &= ((offset >= 0) & (offset <= 9)).all(axis=1) & (offset[:, 0] == 0)
    ok &= offset[:, 1:] @ (10 ** np.arange(18, -1, -1, dtype=np.int64)) == start  # 19 digits fit
    slash = mark - 58
    # The segment id's topic, topic id and partition (its bytes before the id's length byte) and the
    # data key's directory: rows of one partition in a run share them. The first row of each run is
    # checked by validation's own functions (topic name, partition, topic id, directory), the others
    # compared with it byte for byte.
    first = walk.end - np.fromiter(map(len, values), np.int64, n)
    head_a = np.where(ok, first + len(_FRAME), 0)
    head_b = np.where(ok, sid_a - 1, 0)
    dir_b = np.where(ok, slash, data_a)
    same = _same_as_previous(np, buf, head_a, head_b) & _same_as_previous(np, buf, data_a, dir_b)
    same[1:] &= ok[:-1]
    run = np.cumsum(~same) - 1
    names: list[tuple[str, str | None] | None] = [None] * (int(run[-1]) + 1)
    partitions = c["segment_id.partition"]
    tid_a = c["segment_id.topic_id.a"]
    for i in np.flatnonzero(~same & ok).tolist():
        value, base = values[i], int(first[i])
        try:
            topic = _text(value, c, "segment_id.topic", i, base)
            topic_id = None if tid_a[i] < 0 else _text(value, c, "segment_id.topic_id", i, base)
        except UnicodeDecodeError:
            continue
        partition = int(partitions[i])
        folder = topic if topic_id is None else f"{topic}-{topic_id}"
        directory = value[int(data_a[i]) - base : int(slash[i]) - base].decode()
        if validation._tp_problem(topic, partition, topic_id) is None and validation._directory_ok(
            directory, folder, partition
        ):
            names[int(run[i])] = (topic, topic_id)
    ok &= np.array([name is not None for name in names], bool)[run]
    # Strings in bulk (printable ASCII: one numpy conversion a distinct length); a writer id that is
    # not printable ASCII is decoded on its own (rare).
    writer_a, writer_b = span("writer_id")
    writer_text = ok & _printable(np, buf, writer_a, writer_b)
    writers = _ascii_strings(np, buf, writer_a, np.where(writer_text, writer_b, writer_a))
    for i in np.flatnonzero(ok & ~writer_text).tolist():
        base = int(first[i])
        try:
            writers[i] = values[i][int(writer_a[i]) - base : int(writer_b[i]) - base].decode()
        except UnicodeDecodeError:
            ok[i] = False
    sids = _ascii_strings(np, buf, sid_a, np.where(ok, sid_a + 36, sid_a))
    datas = _ascii_strings(np, buf, data_a, np.where(ok, data_b, data_a))
    indexes = [data + "-index" for data in datas]  # checked above: the data key + "-index"
    named = np.empty((len(names), 2), object)
    for k, name in enumerate(names):
        named[k] = (None, None) if name is None else name
    topics, topic_ids = named[run, 0], named[run, 1]
    states = np.array([SegmentState(s).value for s in _STATE_SYMBOLS], object)[np.where(ok, c["state"], 0)]
    out: list[Row | None] = list(
        zip(
            sids,
            topics.tolist(),
            partitions.tolist(),
            start.tolist(),
            end.tolist(),
            states.tolist(),
            c["segment_size_in_bytes"].tolist(),
            count.tolist(),
            c["max_timestamp_ms"].tolist(),
            writers,
            c["writer_epoch"].tolist(),
            topic_ids.tolist(),
            datas,
            indexes,
            strict=True,
        )
    )
    for i in np.flatnonzero(~ok).tolist():
        out[i] = None
    return out

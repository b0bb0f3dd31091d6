"""``processor fetch``: archived records out, as a table, JSON lines, raw values, or a Parquet file.

- ``--format text`` (the default): one line per record, tab-separated: offset, timestamp, the key and
  the value (text as a JSON string, other bytes as a Python bytes literal, each cut after
  ``TEXT_KEY_CHARS`` / ``TEXT_VALUE_CHARS`` characters with the full size named), the header count;
- ``--format jsonl`` (or ``--json``): one JSON object per record (bytes as base64, null distinct from
  empty), the shape of ``/fetch``;
- ``--format raw``: each value's bytes followed by a newline, for piping into other tools (a null
  value writes an empty line);
- ``--output FILE.parquet``: a Parquet file (pyarrow, from the ``spark`` extra) with columns
  topic, partition, offset, timestamp, timestamp_type, key, value, headers (list of key/value).

Records are read in chunks across segments until ``--max-records`` or the end of the remote log; a
progress bar shows on a terminal when many are asked for.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from processor.commands.progress import progress
from processor.config import load_settings
from processor.errors import ConfigError, OffsetNotInRemoteError
from processor.kafka.partition import TopicPartition
from processor.reader.record_json import record_to_json
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import validate_topic
from processor.segment.records import KafkaRecord
from processor.wiring.read_side import open_read_side

CHUNK_RECORDS = 5000
PROGRESS_FROM = 10_000  # records asked for before a progress bar is worth showing


def read_records(
    reader: RemoteReader, tp: TopicPartition, offset: int | None, timestamp: int | None, max_records: int
) -> Iterator[list[KafkaRecord]]:
    """Chunks of records from ``offset`` (or the first at/after ``timestamp``), up to ``max_records``.
    The first chunk raises OffsetNotInRemoteError when nothing is there; later ones end the read."""
    left = max_records
    first = True
    next_offset = offset
    while left > 0:
        want = min(left, CHUNK_RECORDS)
        try:
            if next_offset is None:
                assert timestamp is not None
                chunk = reader.read_from_timestamp(tp, timestamp, want, max_bytes=1 << 62)
            else:
                chunk = reader.read_from_offset(tp, next_offset, want, max_bytes=1 << 62)
        except OffsetNotInRemoteError:
            if first:
                raise
            return
        first = False
        if not chunk:
            return
        yield chunk
        left -= len(chunk)
        next_offset = chunk[-1].offset + 1


class RecordSink(Protocol):
    def write(self, records: list[KafkaRecord]) -> None: ...
    def close(self) -> None: ...


TEXT_KEY_CHARS = 60
TEXT_VALUE_CHARS = 200


def shown_bytes(data: bytes | None, limit: int) -> str:
    """A key or value on one line of text output: ``null``; UTF-8 text as a JSON string (control
    characters, tabs and newlines escaped, other characters as they are); any other bytes as a Python
    bytes literal. Longer than ``limit`` characters: cut, with the full size after it."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        cut = data[:limit]
        return repr(cut) + ("" if len(cut) == len(data) else f"... ({len(data)} bytes)")
    shown = json.dumps(text[:limit], ensure_ascii=False)
    return shown + ("" if len(text) <= limit else f"... ({len(data)} bytes)")


class TextSink:
    def write(self, records: list[KafkaRecord]) -> None:
        for record in records:
            key = shown_bytes(record.key, TEXT_KEY_CHARS)
            value = shown_bytes(record.value, TEXT_VALUE_CHARS)
            print(
                f"{record.offset}\t{record.timestamp}\tkey={key}\tvalue={value}\theaders={len(record.headers)}"
            )

    def close(self) -> None:
        sys.stdout.flush()


class JsonLinesSink:
    def write(self, records: list[KafkaRecord]) -> None:
        sys.stdout.write("".join(json.dumps(record_to_json(r)) + "\n" for r in records))

    def close(self) -> None:
        sys.stdout.flush()


class RawSink:
    def __init__(self, out: BinaryIO | None = None) -> None:
        self.out = out or sys.stdout.buffer

    def write(self, records: list[KafkaRecord]) -> None:
        for record in records:
            if record.value:
                self.out.write(record.value)
            self.out.write(b"\n")

    def close(self) -> None:
        self.out.flush()


def parquet_modules() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, or ConfigError naming the extra that brings them."""
    try:  # pyarrow (the spark extra): only when a Parquet file is asked for
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "--output FILE.parquet needs pyarrow: pip install 'kafka-tiered-processor[spark]'"
        ) from None
    return pa, pq


class ParquetSink:
    def __init__(self, path: Path, topic: str, partition: int) -> None:
        pa, pq = parquet_modules()
        self._pa = pa
        self.topic = topic
        self.partition = partition
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        self.schema = pa.schema(
            [
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.int64()),
                ("timestamp_type", pa.int8()),
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("headers", pa.list_(header)),
            ]
        )
        self.writer = pq.ParquetWriter(str(path), self.schema)
        self.rows = 0

    def write(self, records: list[KafkaRecord]) -> None:
        pa = self._pa
        n = len(records)
        columns: list[Any] = [
            [self.topic] * n,
            [self.partition] * n,
            [r.offset for r in records],
            [r.timestamp for r in records],
            [r.timestamp_type for r in records],
            [r.key for r in records],
            [r.value for r in records],
            [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        ]
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.rows += n

    def close(self) -> None:
        self.writer.close()


def make_sink(args: argparse.Namespace, tp: TopicPartition) -> RecordSink:
    if args.output is not None:
        path = Path(args.output)
        if path.suffix != ".parquet":
            raise ConfigError(f"--output {args.output}: only Parquet files (*.parquet) are written")
        return ParquetSink(path, tp.topic, tp.partition)
    fmt = "jsonl" if args.json else args.format
    if fmt == "jsonl":
        return JsonLinesSink()
    if fmt == "raw":
        return RawSink()
    return TextSink()


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def validate_args(args: argparse.Namespace) -> TopicPartition:
    """Every argument checked before anything connects: a bad one is exit 2 with the option named,
    never a wait on Kafka or S3 first."""
    if not 0 <= args.partition <= INT32_MAX:
        raise ConfigError(f"--partition {args.partition}: a partition is a number from 0 to {INT32_MAX}")
    if args.offset is not None and not 0 <= args.offset <= INT64_MAX:
        raise ConfigError(f"--offset {args.offset}: an offset is a number from 0 to {INT64_MAX}")
    if args.timestamp is not None and not 0 <= args.timestamp <= INT64_MAX:
        raise ConfigError(
            f"--timestamp {args.timestamp}: milliseconds since the epoch, a number from 0 to {INT64_MAX}"
        )
    if args.max_records < 1:
        raise ConfigError(f"--max-records {args.max_records}: must be at least 1")
    if args.output is not None:
        if Path(args.output).suffix != ".parquet":
            raise ConfigError(f"--output {args.output}: only Parquet files (*.parquet) are written")
        parquet_modules()  # installed? Said before anything connects
    return TopicPartition(validate_topic(args.topic), args.partition)


def cmd_fetch(args: argparse.Namespace) -> int:
    tp = validate_args(args)
    settings = load_settings()
    side = open_read_side(settings, tp.topic, tp.partition)
    sink: RecordSink | None = None
    try:
        sink = make_sink(args, tp)
        show = None if args.max_records >= PROGRESS_FROM or args.output else False
        with progress(f"fetching {tp}", args.max_records, enabled=show) as advance:
            for chunk in read_records(side.reader, tp, args.offset, args.timestamp, args.max_records):
                sink.write(chunk)
                advance(len(chunk))
    finally:
        if sink is not None:
            sink.close()
        side.close()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "fetch", help="read records back from remote storage (text, JSON lines, raw, Parquet)"
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--offset", type=int)
    where.add_argument("--timestamp", type=int, help="milliseconds since the epoch")
    parser.add_argument("--max-records", type=int, default=100)
    parser.add_argument(
        "--format",
        choices=["text", "jsonl", "raw"],
        default="text",
        help="text: a line per record; jsonl: a JSON object per record; raw: the values' bytes",
    )
    parser.add_argument("--json", action="store_true", help="same as --format jsonl")
    parser.add_argument("--output", help="write a Parquet file (FILE.parquet) instead of stdout")
    parser.set_defaults(func=cmd_fetch)

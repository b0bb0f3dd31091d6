"""``processor segments --topic T [--partition P] [--json]``: list a topic's remote segments."""

from __future__ import annotations

import argparse
import operator
import sys

from processor.config import load_settings
from processor.kafka.partition import TopicPartition
from processor.reader.record_json import segment_rows_json
from processor.segment.object_keys import validate_topic
from processor.wiring.read_side import open_read_side

# A text line: id, partition, start, end, state, size, object key (fields of a listing row).
_TEXT_LINE = "%-36s  %9s  %12s  %12s  %-22s  %12s  %s\n"
_TEXT_FIELDS = operator.itemgetter(0, 2, 3, 4, 5, 6, 12)


def cmd_segments(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    side = open_read_side(settings, topic, args.partition)
    try:
        cache = side.follower.cache
        tps = [tp for tp in cache.topic_partitions() if tp.topic == topic]
        if args.partition is not None:
            tps = [tp for tp in tps if tp == TopicPartition(topic, args.partition)]
        # rows straight from the cache's bytes (no model a segment), all read before anything is
        # written: a listing that fails writes nothing
        rows = cache.listed_rows(tps)
    finally:
        side.close()
    out = sys.stdout
    if args.json:
        out.write(segment_rows_json(rows))
    else:
        head = f"{'id':36}  {'partition':>9}  {'start':>12}  {'end':>12}  {'state':22}  {'size':>12}"
        out.write(head + "  object key\n")
        out.write("".join(map(_TEXT_LINE.__mod__, map(_TEXT_FIELDS, rows))))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    segments = sub.add_parser("segments", help="list a topic's remote segments")
    segments.add_argument("--topic", required=True)
    segments.add_argument("--partition", type=int)
    segments.add_argument("--json", action="store_true", help="one JSON object per line")
    segments.set_defaults(func=cmd_segments)

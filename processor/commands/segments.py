"""``processor segments --topic T [--partition P] [--json]``: list a topic's remote segments."""

from __future__ import annotations

import argparse
import json
import sys

from processor.config import load_settings
from processor.kafka.partition import TopicPartition
from processor.reader.record_json import segment_to_json
from processor.segment.object_keys import validate_topic
from processor.wiring.read_side import open_read_side


def cmd_segments(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    side = open_read_side(settings, topic, args.partition)
    try:
        cache = side.follower.cache
        tps = [tp for tp in cache.topic_partitions() if tp.topic == topic]
        if args.partition is not None:
            tps = [tp for tp in tps if tp == TopicPartition(topic, args.partition)]
        rows = [segment_to_json(s) for tp in tps for s in cache.listed_segments(tp)]
    finally:
        side.close()
    out = sys.stdout
    if args.json:
        encode = json.JSONEncoder().encode  # one encoder for every row
        out.writelines(encode(row) + "\n" for row in rows)
    else:
        head = f"{'id':36}  {'partition':>9}  {'start':>12}  {'end':>12}  {'state':22}  {'size':>12}"
        out.write(head + "  object key\n")
        out.writelines(
            f"{r['id']:36}  {r['partition']:>9}  {r['start_offset']:>12}  {r['end_offset']:>12}  "
            f"{r['state']:22}  {r['size_bytes']:>12}  {r['object_key']}\n"
            for r in rows
        )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    segments = sub.add_parser("segments", help="list a topic's remote segments")
    segments.add_argument("--topic", required=True)
    segments.add_argument("--partition", type=int)
    segments.add_argument("--json", action="store_true", help="one JSON object per line")
    segments.set_defaults(func=cmd_segments)

"""``processor shred --topic T [--topic-id ID] [--dry-run] [--yes] [--json]``: crypto-shredding.
Destroys the key of T's own (with ``--topic-id``, the key of that topic id of T's own: one
incarnation of a topic deleted and re-created, ``processor keyring new --topic T --topic-id ID``)
that wraps the data keys of T's archive (key ring: its key files, a tombstone kept so reads
say "shredded"; KMS: the key disabled and scheduled for deletion), so no reader can open T's
segments again, while the objects stay where they are and every other topic reads on.

It first says what it will do: the key, how many segments it makes unreadable, and what it cannot
make unreadable. It refuses (changing nothing) when T's archive holds segments stored in the clear
(shredding cannot touch them: delete them with ``processor delete-topic``) or segments whose data
keys are wrapped under another key (the shared default key, or an earlier key of T: give T a key of
its own and run ``processor rekey --topic T`` first). Without ``--yes`` it asks for the topic name
on a terminal, and refuses when there is none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from processor.config import load_settings
from processor.crypto.keys import WrappedKey, key_scope
from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.segment.object_keys import validate_topic
from processor.wiring.encryption import segment_encryption
from processor.wiring.read_side import open_read_side


@dataclass
class ShredPlan:
    topic: str  # the key's scope: the topic, or topic@topic_id
    key_id: str  # the key of the topic's own that would be destroyed
    under_key: int = 0  # segments whose data keys it wraps: unreadable afterwards
    under_other_keys: dict[str, int] = field(default_factory=dict)  # key id -> segments
    plaintext: int = 0
    shredded: bool = False

    @property
    def refusal(self) -> str | None:
        if self.plaintext:
            return (
                f"{self.plaintext} segment(s) of {self.topic} are stored in the clear: shredding cannot "
                "make them unreadable (delete them with processor delete-topic)"
            )
        if self.under_other_keys:
            keys = ", ".join(f"{k} ({n})" for k, n in sorted(self.under_other_keys.items()))
            return (
                f"segments of {self.topic} are wrapped under other keys ({keys}): give it a key of its own "
                f"(processor keyring new --topic ...) and run processor rekey --topic ... first"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "refusal": self.refusal}


def plan_shred(topic: str, key_id: str, segments: list[Any], topic_id: str = "") -> ShredPlan:
    """What shredding ``key_id`` does to ``segments`` (of ``topic_id`` only, when given)."""
    plan = ShredPlan(key_scope(topic, topic_id), key_id)
    others: Counter[str] = Counter()
    for seg in segments:
        if topic_id and str(seg.segment_id.topic_id) != topic_id:
            continue
        if seg.custom_metadata is None:
            plan.plaintext += 1
            continue
        wrapped = WrappedKey.decode(seg.custom_metadata, where=f"custom metadata of {seg.segment_id}")
        if wrapped.key_id == key_id:
            plan.under_key += 1
        else:
            others[wrapped.key_id] += 1
    plan.under_other_keys = dict(others)
    return plan


def _confirmed(topic: str) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"This destroys {topic}'s key: its archive can never be read again. Type the topic name: ")
    return answer.strip() == topic


def cmd_shred(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    provider = segment_encryption(settings)
    if provider is None:
        raise ConfigError(
            "shred needs the key provider the topic is encrypted with: set PROCESSOR_ENCRYPTION"
        )
    side = open_read_side(settings, topic, None)
    try:
        cache = side.follower.cache
        segments = [
            seg
            for tp in cache.topic_partitions()
            if tp.topic == topic
            for seg in cache.remote_state(TopicPartition(topic, tp.partition)).finished()
        ]
    finally:
        side.close()
    topic_id = args.topic_id or ""
    plan = plan_shred(topic, provider.current_key_id(topic, topic_id), segments, topic_id)
    if topic_id and not plan.under_key + plan.plaintext + sum(plan.under_other_keys.values()):
        raise ConfigError(f"{topic} has no archived segment of topic id {topic_id}")
    refusal = plan.refusal
    if not args.json:
        print(
            f"{plan.topic}: key {plan.key_id} wraps the data keys of {plan.under_key} segment(s); shredding "
            "it makes them unreadable for good"
        )
    if refusal is not None:
        if args.json:
            print(json.dumps(plan.to_json()))
        raise ConfigError(f"not shredding: {refusal}")
    if args.dry_run:
        if args.json:
            print(json.dumps(plan.to_json()))
        return 0
    if not args.yes and not _confirmed(plan.topic):
        raise ConfigError("not confirmed: pass --yes, or answer with the topic name on a terminal")
    destroyed = provider.shred_topic(plan.topic)  # refuses a key the scope shares with others
    plan.key_id, plan.shredded = destroyed, True
    if args.json:
        print(json.dumps(plan.to_json()))
    else:
        print(f"{plan.topic}: key {destroyed} destroyed; {plan.under_key} segment(s) can no longer be read")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "shred",
        help="crypto-shred a topic: destroy its own key so its archive can never be read again",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--topic-id", help="only this topic id of the name (an earlier incarnation with a key of its own)"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what it would destroy, change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="one JSON report on stdout")
    parser.set_defaults(func=cmd_shred)

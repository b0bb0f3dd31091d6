"""What ``processor shred`` decides before it destroys anything (processor/commands/shred.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from processor.commands.shred import plan_shred
from processor.crypto.keys import WrappedKey
from processor.metadata.model import RemoteLogSegmentId


@dataclass
class Seg:
    segment_id: RemoteLogSegmentId
    custom_metadata: bytes | None


def seg(key_id: str | None, topic_id: str = "live") -> Seg:
    blob = None if key_id is None else WrappedKey("keyring", key_id, b"x" * 60).encode()
    return Seg(RemoteLogSegmentId("orders", 0, uuid.uuid4(), topic_id), blob)


def test_every_segment_under_the_key_is_a_plan() -> None:
    plan = plan_shred("orders", "k-own", [seg("k-own"), seg("k-own")])
    assert (plan.topic, plan.under_key, plan.refusal) == ("orders", 2, None)


def test_segments_in_the_clear_or_under_other_keys_are_refused_with_what_to_do() -> None:
    clear = plan_shred("orders", "k-own", [seg("k-own"), seg(None)])
    assert clear.refusal is not None and "delete-topic" in clear.refusal
    shared = plan_shred("orders", "k-own", [seg("k-own"), seg("k-default"), seg("k-default")])
    assert shared.under_other_keys == {"k-default": 2}
    assert shared.refusal is not None and "rekey" in shared.refusal


def test_a_topic_id_plans_that_incarnation_only() -> None:
    segments = [seg("k-old", "old"), seg("k-old", "old"), seg("k-live", "live"), seg(None, "live")]
    plan = plan_shred("orders", "k-old", segments, topic_id="old")
    assert (plan.topic, plan.under_key, plan.plaintext, plan.refusal) == ("orders@old", 2, 0, None)

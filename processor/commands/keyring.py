"""``processor keyring new [--topic T [--topic-id ID]] [--dir DIR]``: make a key in a local key ring (a
directory of key files, PROCESSOR_ENCRYPTION_KEYRING); without ``--topic`` the ring's new default
key, with it a key of that topic's own (which ``processor shred`` can destroy without touching other
topics), with ``--topic-id`` too a key of that topic id's own (one incarnation of a re-created topic).

New segments are wrapped under the newest key; older segments keep theirs until ``processor
rekey`` re-wraps them. Key files hold key material: keep the directory readable by the processor
only (a Kubernetes Secret mounted read-only, say).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from processor.config import load_settings
from processor.crypto.keyring import new_key
from processor.crypto.keys import key_scope
from processor.errors import ConfigError
from processor.segment.object_keys import validate_topic


def cmd_keyring_new(args: argparse.Namespace) -> int:
    directory = Path(args.dir) if args.dir else load_settings().encryption_keyring
    if directory is None:
        raise ConfigError("no key ring: give --dir or set PROCESSOR_ENCRYPTION_KEYRING")
    if args.topic_id and not args.topic:
        raise ConfigError("--topic-id needs --topic")
    topic = key_scope(validate_topic(args.topic), args.topic_id or "") if args.topic else None
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_id = new_key(directory, topic=topic)
    if args.json:
        print(json.dumps({"key_id": key_id, "topic": topic, "directory": str(directory)}))
    else:
        whose = f"topic {topic}'s own key" if topic else "the ring's default key"
        print(f"{key_id}: {whose}, in {directory}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("keyring", help="manage a local key ring for encryption at rest")
    actions = parser.add_subparsers(dest="keyring_command", required=True)
    new = actions.add_parser("new", help="make a key: the new default, or one topic's own (--topic)")
    new.add_argument("--topic", help="a key of this topic's own (what shred destroys)")
    new.add_argument(
        "--topic-id", help="a key of this topic id of the topic only (an earlier incarnation, to shred alone)"
    )
    new.add_argument("--dir", help="the key ring directory (default PROCESSOR_ENCRYPTION_KEYRING)")
    new.add_argument("--json", action="store_true", help="one JSON object on stdout")
    new.set_defaults(func=cmd_keyring_new)

"""``processor config``: the effective configuration, where each value came from, secrets masked.

Sources: ``environment`` (a PROCESSOR_* variable), ``default``, or ``derived`` (a default that
adapted to another setting, e.g. the block size to a small PROCESSOR_SEGMENT_BYTES). Sizes and
durations are shown with units. Credentials of the AWS chain are listed by presence only; every
secret setting (a ``SecretStr``) shows ``***``, and so does the password inside a URL.

``--check``: a pre-flight check instead. The worker's own start-up validation (commands/worker.py
START_UP_CHECKS), each problem printed, exit 2 where ``processor worker`` would exit 2; with
``--connect`` it also reaches the broker and the bucket (read-only: nothing is created) and exits 3
when either is unreachable or refuses, as the worker would. It asks the broker what the worker's
principal may do (the ACLs docs/security.md lists for a worker, :func:`worker_permissions`) and
names each missing one: a worker without one of them stops within seconds of its start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from processor.commands.config_reference import DEFAULTS
from processor.commands.worker import start_up_problems
from processor.config import ENV_PREFIX, Settings, load_settings
from processor.errors import ConfigError, ServiceUnavailableError, StorageError
from processor.logs import MASK, mask_url_password, setup_logging
from processor.units import format_duration_ms, format_size

if TYPE_CHECKING:
    from processor.kafka.permission_check import Permission

AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)
_AWS_SECRET = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}


def _shown(name: str, value: Any) -> tuple[Any, str]:
    """(JSON value, display text) of one setting, secrets masked."""
    if isinstance(value, SecretStr):
        return MASK, MASK
    if isinstance(value, tuple):
        return list(value), ",".join(str(v) for v in value) or "(none)"
    if value is None:
        return None, "(unset)"
    if value == -1 and not isinstance(value, bool) and name.endswith(("_ms", "_bytes", "_per_second")):
        return value, "unlimited"  # -1 is how these settings say "no limit", never a size or a time
    if name.endswith("_bytes") and isinstance(value, int):
        return value, format_size(value)
    if name.endswith("_ms") and isinstance(value, int):
        return value, format_duration_ms(value)
    if isinstance(value, bool):
        return value, str(value).lower()
    if isinstance(value, str):
        shown = mask_url_password(value)  # e.g. PROCESSOR_S3_ENDPOINT_URL=https://user:pw@host
        return shown, shown
    return (str(value) if not isinstance(value, int | float) else value), str(value)


def _effective_default(name: str, settings: Settings) -> str | None:
    """What an unset or empty setting stands for, as docs/configuration.md gives its default ("all",
    the AWS endpoint, the local worker's URL ...); None where unset means nothing more."""
    if name == "worker_urls":
        return f"http://127.0.0.1:{settings.web_port}"
    documented = DEFAULTS.get(name)
    return documented.strip("`") if documented is not None else None


def describe(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    rows = []
    for name, field in Settings.model_fields.items():
        variable = f"{ENV_PREFIX}{name.upper()}"
        value = getattr(settings, name)
        if variable in environ:
            source = "environment"
        elif field.default_factory is not None or value == field.default:
            source = "default"
        else:
            source = "derived"
        as_json, text = _shown(name, value)
        if value in (None, ()) and (effective := _effective_default(name, settings)) is not None:
            text = effective
        rows.append({"variable": variable, "value": as_json, "display": text, "source": source})
    aws = [
        {
            "variable": v,
            "value": (MASK if v in _AWS_SECRET else environ[v]) if v in environ else None,
            "source": "environment" if v in environ else "unset",
        }
        for v in AWS_VARIABLES
    ]
    return {"settings": rows, "aws": aws}


# What a worker does on each resource (docs/security.md, "Kafka ACLs each role needs")
_WORKER_TOPIC = ("CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "READ", "WRITE")
SECURITY_DOC = "docs/security.md#kafka-acls-each-role-needs"


def worker_permissions(settings: Settings) -> list[Permission]:
    """The ACLs a worker's principal needs, as docs/security.md lists them (the optional
    DescribeConfigs on the cluster left out: without it the worker skips one check and says so)."""
    from processor.kafka.permission_check import Permission  # deferred: confluent_kafka, only with --connect

    return [
        *(
            Permission(
                "topic", t, ("READ", "DESCRIBE"), "PROCESSOR_TOPICS: fetching the records, their offsets"
            )
            for t in settings.topics
        ),
        Permission(
            "topic",
            settings.metadata_topic,
            _WORKER_TOPIC,
            "PROCESSOR_METADATA_TOPIC: the claims and segment records",
            True,
        ),
        Permission(
            "topic",
            settings.deletion_topic,
            _WORKER_TOPIC,
            "PROCESSOR_DELETION_TOPIC: deletions to retry",
            True,
        ),
        Permission(
            "topic",
            f"{settings.app_id}-__assignor-__leader",
            ("CREATE", "DESCRIBE", "READ", "WRITE"),
            "Faust's group assignor topic",
            True,
        ),
        Permission(
            "group",
            settings.app_id,
            ("READ",),
            "PROCESSOR_APP_ID: the consumer group whose assignment is leadership",
        ),
    ]


def _reach(settings: Settings, timeout_s: float) -> tuple[list[str], list[str], list[str]]:
    """(what was reached, configuration problems, unreachable services): the broker with the checks
    the worker starts with (processor.kafka.admin.check_broker), then the bucket with a HeadBucket
    on the readiness probe's client (short timeouts, no retries). Nothing is created."""
    from processor.kafka.admin import BROKER_REFUSED_S, check_broker, partition_counts
    from processor.kafka.permission_check import missing_permissions
    from processor.wiring.storage import build_storage

    reached: list[str] = []
    found: dict[str, int] | None = None
    config: list[str] = []
    unreachable: list[str] = []
    try:
        # --timeout is for a broker that does not answer; one that refuses is said at once
        admin = check_broker(settings.kafka, timeout_s, refused_s=min(BROKER_REFUSED_S, timeout_s))
    except ConfigError as exc:  # e.g. an OAUTHBEARER token provider that does not import
        config.append(str(exc))
    except ServiceUnavailableError as exc:
        unreachable.append(str(exc))
    else:
        try:
            found = partition_counts(admin, [*settings.topics, settings.metadata_topic], timeout_s)
        except Exception as exc:  # confluent_kafka's KafkaException: this module may not import it
            unreachable.append(
                f"Kafka at {settings.bootstrap_servers} answered, then listed no topics: {exc}"
            )
    if found is not None:
        sources = sum(1 for t in settings.topics if t in found)
        metadata = "exists" if settings.metadata_topic in found else "missing (the worker creates it)"
        reached.append(
            f"kafka: ok ({settings.bootstrap_servers}; source topics found: {sources} of "
            f"{len(settings.topics)}; metadata topic {settings.metadata_topic}: {metadata})"
        )
        needs = worker_permissions(settings)
        try:
            missing, notes = missing_permissions(admin, needs, timeout_s)
        except Exception as exc:  # confluent_kafka's KafkaException: this module may not import it
            missing, notes = [], [f"not checked: {exc}"]
        who = settings.kafka.security.describe()
        for lack in missing:
            unreachable.append(
                f"the worker's Kafka principal ({who}) lacks {lack.describe()}: the worker would stop "
                f"(what a worker needs: {SECURITY_DOC})"
            )
        if not missing:
            checked = "checked" if not notes else "checked but for the notes below"
            reached.append(f"kafka ACLs: ok (the worker's {len(needs)} permissions {checked})")
        reached += [f"kafka ACLs: {note}" for note in notes]
    storage = build_storage(settings, probe=True)
    try:
        storage.check_bucket()
        reached.append(f"{settings.storage}: ok ({_store_name(settings)})")
        unreachable += [
            f"the worker's {settings.storage} credentials lack {name} on {_store_name(settings)}: "
            f"the worker would stop (what a worker needs: {STORAGE_ROLES_DOC})"
            for name in storage.missing_permissions()
        ]
    except StorageError as exc:
        unreachable.append(str(exc))
    finally:
        storage.close()
    return reached, config, unreachable


STORAGE_ROLES_DOC = "docs/security.md#least-privilege-on-google-cloud-storage-and-azure-blob-storage"


def _store_name(settings: Settings) -> str:
    if settings.storage == "gcs":
        return f"bucket {settings.gcs_bucket!r}"
    if settings.storage == "azure":
        return f"container {settings.azure_container!r}"
    return f"bucket {settings.s3_bucket!r}"


def cmd_check(settings: Settings, connect: bool, timeout_s: float) -> int:
    """The pre-flight check: 0 the worker would start, 2 it would refuse its configuration, 3 (with
    ``connect``) Kafka or S3 is unreachable. Each problem on stderr, the checks passed on stdout."""
    problems = start_up_problems(settings)
    unreachable: list[str] = []
    if problems:
        print(f"configuration: {len(problems)} problem(s); the worker would exit 2")
    else:
        print("configuration: ok (the worker's start-up validation passes)")
        if connect:
            setup_logging(settings.log_level, settings.log_format)  # librdkafka's warnings, as the worker's
            reached, problems, unreachable = _reach(settings, timeout_s)
            for line in reached:
                print(line)
    for problem in problems + unreachable:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems else 3 if unreachable else 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.connect and not args.check:
        raise ConfigError("--connect goes with --check: processor config --check --connect")
    settings = load_settings()
    if args.check:
        return cmd_check(settings, args.connect, args.timeout)
    report = describe(settings, os.environ)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    width = max(len(r["variable"]) for r in report["settings"])
    for r in report["settings"]:
        print(f"{r['variable']:{width}}  {r['display']:30}  {r['source']}")
    print("\nS3 credentials come from the AWS chain:")
    for a in report["aws"]:
        print(f"  {a['variable']:{width - 2}}  {a['value'] if a['value'] is not None else '(unset)'}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "config", help="print the effective configuration (secrets masked) and where each value came from"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="machine-readable output")
    mode.add_argument(
        "--check",
        action="store_true",
        help="pre-flight check: run the worker's start-up validation, print each problem; "
        "exit 0 if the worker would start, 2 if it would refuse the configuration",
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="with --check: also reach the Kafka broker and the S3 bucket (nothing is created); "
        "exit 3 if either is unreachable",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --connect: how long to wait for a broker that does not answer (default 10; one "
        "that refuses every connection is said after 1 s; S3 gets 2 s to connect)",
    )
    parser.set_defaults(func=cmd_config)

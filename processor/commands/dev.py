"""``processor dev up|down|status|env|produce|truncate``: the local stack (Apache Kafka or Tansu, and
SeaweedFS), and what a first hour on it needs: its settings as shell exports, sample records in a
topic, and the broker deleting them as its retention would."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from processor.devstack import emulators, stack
from processor.devstack import secure as secure_kafka
from processor.devstack.sample_data import produce_samples
from processor.devstack.truncate import truncate_topic
from processor.errors import ConfigError, ServiceUnavailableError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin

DEFAULT_STACK_DIR = ".stack"


def cmd_dev(args: argparse.Namespace) -> int:
    stack_dir = Path(args.dir)
    if args.action == "up":
        info = stack.start(
            stack_dir,
            secure=args.secure,
            broker=args.broker or stack.default_broker(),
            storage=args.storage,
        )
        secured = info.secured
        if args.json:
            report = {**stack.status(stack_dir), "env": info.env()}
            if secured is not None:
                base = {k: v for k, v in info.env().items() if k not in secure_kafka.SASL_VARIABLES}
                report["mtls_env"] = {**base, **secured.mtls_env()}
            print(json.dumps(report, indent=2))
            return 0
        print(f"local stack running from {info.dir}")
        broker = "Apache Kafka" if info.broker == stack.KAFKA else "Tansu"
        if secured is None:
            print(f"  Kafka:             {info.bootstrap_servers}  ({broker})")
        else:
            mechanisms = "SCRAM-SHA-512/256, PLAIN, OAUTHBEARER"
            print(f"  Kafka SASL_SSL:    {secured.sasl_ssl.bootstrap_servers}  ({mechanisms})")
            print(f"  Kafka mutual TLS:  {secured.mtls.bootstrap_servers}  (client certificate required)")
            print(f"  throwaway CA:      {secured.pki.ca_file}")
        if info.storage == emulators.GCS:
            endpoint = info.storage_env["PROCESSOR_GCS_ENDPOINT_URL"]
            print(f"  GCS (fake-gcs-server): {endpoint}  bucket {info.bucket}")
        elif info.storage == emulators.AZURE:
            print(f"  Azure Blob (Azurite):  container {info.bucket}")
        else:
            print(f"  S3 (SeaweedFS):    {info.s3_endpoint_url}  bucket {info.bucket}")
        print("  use it with:" if secured is None else "  use the SASL_SSL listener with:")
        for line in secure_kafka.exports(info.env()):
            print(f"    {line}")
        if secured is not None:
            print("  or the mutual-TLS listener (the same cluster) with:")
            for line in secure_kafka.exports(secured.mtls_env(), unset=secure_kafka.SASL_VARIABLES):
                print(f"    {line}")
        return 0
    if args.action in ("env", "produce", "truncate"):
        running = stack.load(stack_dir)
        if running is None or not stack.status(stack_dir).get("running"):
            raise ServiceUnavailableError(
                f"no local stack runs from {stack_dir}: start one with processor dev up"
            )
        return _use_stack(args, running)
    if args.action == "down":
        stopped = stack.stop(stack_dir)
        print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        return 0
    status = stack.status(stack_dir)
    print(json.dumps(status, indent=2) if args.json else _format_status(status))
    return 0 if status.get("running") else 1


def _use_stack(args: argparse.Namespace, info: stack.StackInfo) -> int:
    if args.action == "env":
        for line in secure_kafka.exports(dev_env(info)):
            print(line)
        return 0
    if not args.topic:
        raise ConfigError(f"processor dev {args.action} needs --topic")
    if args.action == "produce":
        ensure_topic(new_admin(info.kafka, "processor-dev"), args.topic, args.partitions, 1, {})
        produce_samples(info.kafka, args.topic, args.records, args.partitions, big_every=0)
        print(f"produced {args.records} sample records to {args.topic} ({args.partitions} partitions)")
        return 0
    if info.broker != stack.KAFKA:
        raise ConfigError(
            "Tansu never deletes records (no retention, no DeleteRecords): "
            "truncate needs the stack on Apache Kafka (processor dev up --broker kafka)"
        )
    for partition, (low, high) in sorted(truncate_topic(info.kafka, args.topic).items()):
        print(f"{args.topic}-{partition}: the broker deleted offsets {low}..{high - 1}, now starts at {high}")
    return 0


def dev_env(info: stack.StackInfo) -> dict[str, str]:
    """The stack's settings for the commands, a worker and a gateway in one shell: its Kafka and S3
    (addresses, security, credentials), and the read API and the gateway on loopback only (the read
    API open there without a token; clients reach the gateway at the address it listens on)."""
    return {**info.env(), "PROCESSOR_WEB_HOST": "127.0.0.1", "PROCESSOR_GATEWAY_HOST": "127.0.0.1"}


def _format_status(status: dict[str, object]) -> str:
    if not status.get("processes"):
        return f"no local stack runs from {status['dir']}"
    lines = [f"local stack in {status['dir']}: {'running' if status['running'] else 'NOT fully running'}"]
    procs = status["processes"]
    assert isinstance(procs, dict)
    for name, p in procs.items():
        lines.append(f"  {name:6} pid {p['pid']:>7}  {'running' if p['running'] else 'stopped'}")
    store = status.get("storage", emulators.S3)
    where = f"S3 {status['s3_endpoint_url']}" if store == emulators.S3 else f"{store} emulator"
    lines.append(f"  Kafka {status['bootstrap_servers']}  {where}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser(
        "dev",
        help="the local stack (Apache Kafka or Tansu, and SeaweedFS): up, down, status; env (its settings as "
        "shell exports), produce (sample records), truncate (the broker deletes a topic's records)",
    )
    dev.add_argument("action", choices=["up", "down", "status", "env", "produce", "truncate"])
    dev.add_argument("--dir", default=DEFAULT_STACK_DIR, help="where the stack keeps its data and state")
    dev.add_argument("--json", action="store_true", help="machine-readable output")
    dev.add_argument(
        "--secure",
        action="store_true",
        help="up: Apache Kafka's own listeners secured (SASL_SSL with SCRAM, PLAIN and OAUTHBEARER, and "
        "mutual TLS), a throwaway CA, ACLs on; prints the exports",
    )
    dev.add_argument(
        "--broker",
        choices=stack.BROKERS,
        default=None,
        help=f"up: the broker: kafka (Apache Kafka, needs Java 17 and Maven) or tansu (no Java needed); "
        f"default: ${stack.BROKER_ENV}, else kafka where Java and Maven are on PATH",
    )
    dev.add_argument(
        "--storage",
        choices=emulators.KINDS,
        default=emulators.S3,
        help="up: where the archive is: s3 (SeaweedFS), gcs (the fake-gcs-server emulator) or azure "
        "(the Azurite emulator); the emulators are installed on first use (needs go, or npm)",
    )
    dev.add_argument("--topic", help="produce, truncate: the topic")
    dev.add_argument("--records", type=int, default=10_000, help="produce: how many sample records")
    dev.add_argument("--partitions", type=int, default=2, help="produce: partitions of a topic it creates")
    dev.set_defaults(func=cmd_dev)

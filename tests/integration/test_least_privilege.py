"""A worker's principal with exactly the ACLs docs/security.md lists, on the secured stack (Apache Kafka's
StandardAuthorizer, nobody allowed anything unless granted): it offloads. Without one of them (the
Faust assignor topic's) it stops at start with an error naming what it was refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.worker_process import WorkerProcess
from tests.support.kafka_acls import Grant, user_with_exactly
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

USER, PASSWORD = "least-privilege", "least-privilege-pw"


def _documented(topic: str, meta: str, app: str) -> list[Grant]:
    admin_ops = ["CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "READ", "WRITE"]
    return [
        ("TOPIC", topic, "LITERAL", ["READ", "DESCRIBE"]),
        ("TOPIC", meta, "LITERAL", admin_ops),
        ("TOPIC", f"{meta}-deletions", "LITERAL", admin_ops),
        ("TOPIC", f"{app}-__assignor-__leader", "LITERAL", ["CREATE", "DESCRIBE", "READ", "WRITE"]),
        ("GROUP", app, "LITERAL", ["READ"]),
    ]


def _worker(secured_stack: StackInfo, tmp: Path, topic: str, meta: str, app: str) -> WorkerProcess:
    env = secured_stack.worker_env(
        tmp / "data", topic, PROCESSOR_METADATA_TOPIC=meta, PROCESSOR_DELETION_TOPIC=f"{meta}-deletions",
        PROCESSOR_APP_ID=app, PROCESSOR_S3_PREFIX=app, PROCESSOR_SEGMENT_MS="500",
        PROCESSOR_SASL_USERNAME=USER, PROCESSOR_SASL_PASSWORD=PASSWORD,
    )  # fmt: skip
    tmp.mkdir(parents=True, exist_ok=True)
    return WorkerProcess(env, tmp / "worker.log")


@pytest.mark.timeout(240)
def test_a_worker_with_exactly_the_documented_acls_offloads_and_without_one_says_what_it_was_refused(
    secured_stack: StackInfo, tmp_path: Path
) -> None:
    topic, meta, app = "least-orders", "__remote_log_metadata_least", "least-app"
    kafka = secured_stack.kafka  # the dev user, allowed everything: makes and fills the topic
    ensure_topic(new_admin(kafka, "least"), topic, 2, 1, {})
    produced = produce_samples(kafka, topic, 400, 2, big_every=0)
    ends = {TopicPartition(topic, p): sum(1 for r in produced if r.partition == p) - 1 for p in range(2)}

    grants = _documented(topic, meta, app)
    user_with_exactly(
        secured_stack, USER, PASSWORD, grants[:3] + grants[4:]
    )  # all but the Faust assignor topic's
    refused = _worker(secured_stack, tmp_path / "refused", topic, meta, app)
    assert refused.proc.wait(120) != 0
    assert f"{app}-__assignor-__leader" in refused.log() and "Authorization failed" in refused.log()

    user_with_exactly(secured_stack, USER, PASSWORD, grants)
    worker = _worker(secured_stack, tmp_path / "granted", topic, meta, app)
    try:
        wait_offloaded(kafka, meta, ends, 120, worker.proc)
    finally:
        worker.stop()

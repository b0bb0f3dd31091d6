"""Safe defaults for managed Kafka: the topics the processor creates (metadata, deletion, Faust's
``<app_id>-__assignor-__leader``) get min(3, brokers) replicas unless
``PROCESSOR_METADATA_REPLICATION_FACTOR`` says otherwise, ``min.insync.replicas`` factor-1 from a
factor of 3, and a creation the cluster refuses stops the start naming the setting and the variable
(the real single-broker path is in tests/integration/test_metadata_topic.py)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from unittest.mock import MagicMock

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.config import load_settings
from processor.errors import ConfigError, MetadataTopicError, ServiceUnavailableError
from processor.kafka import admin
from processor.kafka.admin import (
    cluster_replication,
    creation_config,
    ensure_topic,
    min_insync_for,
    replication_for,
)
from processor.metadata.topic_io import METADATA_TOPIC_CONFIG, ensure_compacted_topic
from processor.wiring.faust_app import build_app
from tests.support.futures import done


class FakeAdmin:
    """A cluster of ``brokers`` brokers and no topics; CreateTopics answers ``create_error`` (or
    succeeds). ``describe_cluster=False``: a broker without DescribeCluster (the metadata counts)."""

    def __init__(
        self, brokers: int, create_error: KafkaError | None = None, *, describe_cluster: bool = True
    ) -> None:
        self.brokers = brokers
        self.create_error = create_error
        self.answers_describe_cluster = describe_cluster
        self.created: list[NewTopic] = []

    def describe_cluster(self, **_: Any) -> Future[Any]:
        if not self.answers_describe_cluster:
            return done(None, KafkaError(KafkaError._UNSUPPORTED_FEATURE, "no DescribeCluster"))
        return done(SimpleNamespace(nodes=[object() for _ in range(self.brokers)]))

    def list_topics(self, **_: Any) -> Any:
        return SimpleNamespace(topics={}, brokers={i: object() for i in range(self.brokers)})

    def create_topics(self, topics: list[NewTopic], **_: Any) -> dict[str, Future[Any]]:
        self.created.extend(topics)
        return {t.topic: done(None, self.create_error) for t in topics}


def admin_of(fake: FakeAdmin) -> AdminClient:
    return cast(AdminClient, fake)


# -- the pure decision --------------------------------------------------------------------------


@pytest.mark.parametrize(("brokers", "factor"), [(0, 1), (1, 1), (2, 2), (3, 3), (4, 3), (12, 3)])
def test_unset_the_factor_is_min_of_3_and_the_broker_count(brokers: int, factor: int) -> None:
    assert replication_for(brokers, None) == factor


@pytest.mark.parametrize(("brokers", "explicit"), [(1, 3), (3, 1), (6, 5), (2, 2)])
def test_an_explicit_factor_wins_over_the_cluster(brokers: int, explicit: int) -> None:
    assert replication_for(brokers, explicit) == explicit


@pytest.mark.parametrize(("factor", "min_insync"), [(1, None), (2, None), (3, 2), (4, 3), (5, 4)])
def test_min_insync_replicas_is_factor_minus_one_from_a_factor_of_3(
    factor: int, min_insync: int | None
) -> None:
    assert min_insync_for(factor) == min_insync


@pytest.mark.parametrize("factor", range(1, 33))
def test_min_insync_replicas_is_never_above_factor_minus_one(factor: int) -> None:
    wanted = min_insync_for(factor)
    assert wanted is None or 1 <= wanted <= factor - 1
    given = creation_config({"min.insync.replicas": "40"}, factor).get("min.insync.replicas")
    assert factor == 1 or given is None or int(given) <= factor - 1


def test_creation_config_adds_min_insync_only_from_3_and_keeps_the_rest() -> None:
    assert creation_config(METADATA_TOPIC_CONFIG, 3) == {**METADATA_TOPIC_CONFIG, "min.insync.replicas": "2"}
    assert creation_config(METADATA_TOPIC_CONFIG, 1) == METADATA_TOPIC_CONFIG
    assert creation_config({"min.insync.replicas": "1"}, 3) == {"min.insync.replicas": "1"}
    assert "min.insync.replicas" not in METADATA_TOPIC_CONFIG  # the checked config is not changed


def test_the_setting_defaults_to_none_meaning_from_the_cluster() -> None:
    assert load_settings({}).metadata_replication_factor is None
    explicit = load_settings({"PROCESSOR_METADATA_REPLICATION_FACTOR": "2"})
    assert explicit.metadata_replication_factor == 2
    with pytest.raises(ConfigError, match="PROCESSOR_METADATA_REPLICATION_FACTOR"):
        load_settings({"PROCESSOR_METADATA_REPLICATION_FACTOR": "0"})


# -- creation against a (fake) cluster -----------------------------------------------------------


@pytest.mark.parametrize("describe_cluster", [True, False])
def test_a_topic_created_on_three_brokers_gets_3_replicas_and_min_insync_2(describe_cluster: bool) -> None:
    fake = FakeAdmin(3, describe_cluster=describe_cluster)
    assert ensure_topic(admin_of(fake), "__meta", 4, None, dict(METADATA_TOPIC_CONFIG))
    (created,) = fake.created
    assert (created.num_partitions, created.replication_factor) == (4, 3)
    assert created.config == {**METADATA_TOPIC_CONFIG, "min.insync.replicas": "2"}


def test_a_topic_created_on_one_broker_gets_1_replica_and_the_broker_default_min_insync() -> None:
    fake = FakeAdmin(1)
    assert ensure_topic(admin_of(fake), "__meta", 4, None, {"cleanup.policy": "compact"})
    (created,) = fake.created
    assert created.replication_factor == 1
    assert created.config == {"cleanup.policy": "compact"}


def test_an_explicit_factor_is_created_as_given() -> None:
    fake = FakeAdmin(6)
    ensure_topic(admin_of(fake), "__meta", 4, 1, {})
    assert fake.created[0].replication_factor == 1
    ensure_topic(admin_of(fake), "__deletions", 4, -1, {})  # the broker's default: nothing added
    assert (fake.created[1].replication_factor, fake.created[1].config) == (-1, {})


def test_an_explicit_factor_asks_the_cluster_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_admin(*_: Any, **__: Any) -> Any:
        raise AssertionError("the cluster was asked")

    monkeypatch.setattr(admin, "new_admin", no_admin)
    assert cluster_replication("127.0.0.1:1", 3) == 3


def test_the_factor_from_the_cluster_is_min_of_3_and_its_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "new_admin", lambda *_, **__: FakeAdmin(5))
    assert cluster_replication("127.0.0.1:1", None) == 3
    monkeypatch.setattr(admin, "new_admin", lambda *_, **__: FakeAdmin(1))
    assert cluster_replication("127.0.0.1:1", None) == 1


@pytest.mark.parametrize(("explicit", "brokers", "factor"), [(None, 4, 3), (None, 1, 1), ("2", 4, 2)])
def test_faust_creates_its_leader_topic_with_the_same_factor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, explicit: str | None, brokers: int, factor: int
) -> None:
    monkeypatch.setattr(admin, "new_admin", lambda *_, **__: FakeAdmin(brokers))
    env = {"PROCESSOR_TOPICS": "orders", "PROCESSOR_DATA_DIR": str(tmp_path), "PROCESSOR_WEB_AUTH": "none"}
    if explicit is not None:
        env["PROCESSOR_METADATA_REPLICATION_FACTOR"] = explicit
    app = build_app(load_settings(env), MagicMock(), MagicMock(), None)
    assert app.conf.topic_replication_factor == factor
    leader = app._leader_assignor._leader_topic  # type: ignore[attr-defined]
    assert leader.get_topic_name() == "tiered-storage-processor-__assignor-__leader"
    assert leader.replicas == factor


def test_a_cluster_that_cannot_be_counted_is_a_named_unavailability(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unreachable(FakeAdmin):
        def list_topics(self, **_: Any) -> Any:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection refused"))

    monkeypatch.setattr(admin, "new_admin", lambda *_, **__: Unreachable(0, describe_cluster=False))
    with pytest.raises(ServiceUnavailableError, match="PROCESSOR_METADATA_REPLICATION_FACTOR"):
        cluster_replication("127.0.0.1:1", None)


# -- a refusal at creation -----------------------------------------------------------------------


def create_refused(error: KafkaError, brokers: int = 1, replication: int | None = None) -> str:
    fake = FakeAdmin(brokers, error)
    with pytest.raises(ConfigError) as refused:
        ensure_compacted_topic(
            admin_of(fake),
            "__remote_log_metadata",
            "metadata topic",
            4,
            replication,
            dict(METADATA_TOPIC_CONFIG),
            None,
        )
    return str(refused.value)


def test_a_policy_violation_names_the_topic_the_setting_and_the_variable() -> None:
    text = create_refused(
        KafkaError(KafkaError.POLICY_VIOLATION, "Topic replication factor must be 3"), replication=1
    )
    assert "metadata topic __remote_log_metadata" in text
    assert "replication.factor=1" in text
    assert "POLICY_VIOLATION" in text
    assert "Topic replication factor must be 3" in text
    assert "PROCESSOR_METADATA_REPLICATION_FACTOR" in text


def test_an_invalid_replication_factor_names_the_factor_from_the_cluster() -> None:
    text = create_refused(
        KafkaError(
            KafkaError.INVALID_REPLICATION_FACTOR, "Replication factor: 2 larger than available brokers"
        ),
        brokers=2,
    )
    assert "replication.factor=2" in text
    assert "PROCESSOR_METADATA_REPLICATION_FACTOR" in text


def test_a_refused_config_names_that_config() -> None:
    text = create_refused(
        KafkaError(KafkaError.INVALID_CONFIG, "min.insync.replicas: value 2 not allowed"), brokers=3
    )
    assert "min.insync.replicas=2" in text
    assert "replication.factor" not in text.split("(")[0]
    assert "PROCESSOR_METADATA_REPLICATION_FACTOR" in text


def test_a_policy_without_details_lists_every_setting_sent() -> None:
    text = create_refused(KafkaError(KafkaError.POLICY_VIOLATION), brokers=3)
    assert "replication.factor=3" in text
    assert "partitions=4" in text
    assert "min.insync.replicas=2" in text
    assert "cleanup.policy=compact" in text


def test_other_creation_failures_stay_metadata_topic_errors() -> None:
    fake = FakeAdmin(1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed"))
    with pytest.raises(MetadataTopicError, match="cannot create or describe metadata topic"):
        ensure_compacted_topic(admin_of(fake), "__m", "metadata topic", 4, None, {}, None)


def test_a_topic_created_meanwhile_is_no_error() -> None:
    fake = FakeAdmin(1, KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists"))
    assert ensure_topic(admin_of(fake), "__m", 4, None, {})


@pytest.mark.parametrize(("brokers", "factor"), [(1, 1), (3, 3), (6, 3)])
def test_the_restores_progress_and_target_topics_get_the_clusters_factor_not_the_brokers_default(
    monkeypatch: pytest.MonkeyPatch, brokers: int, factor: int
) -> None:
    from processor.restore.target import TargetCluster

    fake = FakeAdmin(brokers)
    monkeypatch.setattr(TargetCluster, "admin", lambda self: admin_of(fake))
    monkeypatch.setattr(TargetCluster, "partition_count", lambda self, topic: 1)
    target = TargetCluster("127.0.0.1:9")
    target.ensure_progress_topic("__processor_restore_progress")
    target.create_topic("orders-restored", 4)
    assert [(t.topic, t.replication_factor) for t in fake.created] == [
        ("__processor_restore_progress", factor),
        ("orders-restored", factor),
    ]

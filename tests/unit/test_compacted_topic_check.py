"""The start-up check of the compacted topics against a broker that refuses to alter them (the real
broker path is in tests/integration/test_metadata_topic.py; Tansu has no ACLs to refuse with)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from processor.errors import MetadataTopicError
from processor.metadata.topic_io import MIN_COMPACTION_LAG_MS, require_compacted
from tests.support.futures import done


class FakeAdmin:
    """DescribeConfigs answers ``config``; IncrementalAlterConfigs answers ``alter_error`` (or
    applies the entries). No ``alter_configs``: the resetting call must never be made."""

    def __init__(self, config: Mapping[str, str | None], alter_error: KafkaError | None = None) -> None:
        self.config = dict(config)
        self.alter_error = alter_error
        self.altered: list[tuple[str, str | None, Any]] = []

    def describe_configs(self, resources: list[ConfigResource], **_: Any) -> dict[Any, Future[Any]]:
        entries = {k: ConfigEntry(k, v) for k, v in self.config.items()}
        return {r: done(entries) for r in resources}

    def incremental_alter_configs(self, resources: list[ConfigResource], **_: Any) -> dict[Any, Future[Any]]:
        for r in resources:
            for e in r.incremental_configs:
                self.altered.append((e.name, e.value, e.incremental_operation))
                if self.alter_error is None:
                    self.config[e.name] = e.value
        return {r: done(None, self.alter_error) for r in resources}


def check(admin: FakeAdmin, topic: str, what: str, min_lag_ms: int | None) -> None:
    require_compacted(cast(AdminClient, admin), topic, what, min_lag_ms)


def test_a_refused_raise_stops_the_start_with_the_command_to_run() -> None:
    admin = FakeAdmin(
        {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed"),
    )
    with pytest.raises(MetadataTopicError) as refused:
        check(admin, "__meta", "metadata topic", MIN_COMPACTION_LAG_MS)
    text = str(refused.value)
    assert "min.compaction.lag.ms=0" in text
    assert "authorization" in text.lower()
    assert (
        "kafka-configs.sh --bootstrap-server <brokers> --alter --entity-type topics "
        "--entity-name __meta --add-config min.compaction.lag.ms=86400000"
    ) in text
    assert admin.altered == [("min.compaction.lag.ms", "86400000", AlterConfigOpType.SET)]


def test_only_the_lag_is_set_incrementally_and_the_raise_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "retention.ms": "1"})
    with caplog.at_level(logging.WARNING, logger="processor.metadata.topic_io"):
        check(admin, "__meta", "metadata topic", MIN_COMPACTION_LAG_MS)
    assert admin.altered == [("min.compaction.lag.ms", "86400000", AlterConfigOpType.SET)]
    assert admin.config["retention.ms"] == "1"
    assert any("from 60000 to 86400000" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("lag", ["86400000", "604800000"])
def test_a_day_or_more_is_left_alone(lag: str) -> None:
    admin = FakeAdmin({"cleanup.policy": "compact", "min.compaction.lag.ms": lag})
    check(admin, "__meta", "metadata topic", MIN_COMPACTION_LAG_MS)
    assert admin.altered == []


@pytest.mark.parametrize("config", [{"cleanup.policy": "delete"}, {}], ids=["delete", "unset"])
def test_not_compacted_is_refused_without_altering_anything(config: dict[str, str]) -> None:
    admin = FakeAdmin(config)
    with pytest.raises(MetadataTopicError, match=r"cleanup\.policy=.*--add-config cleanup\.policy=compact"):
        check(admin, "__deletions", "deletion topic", None)
    assert admin.altered == []


def test_unreadable_configuration_is_refused() -> None:
    class Unreadable(FakeAdmin):
        def describe_configs(self, resources: list[ConfigResource], **_: Any) -> dict[Any, Future[Any]]:
            return {
                r: done(None, KafkaError(KafkaError._UNSUPPORTED_FEATURE, "unsupported")) for r in resources
            }

    with pytest.raises(MetadataTopicError, match="DescribeConfigs"):
        check(Unreadable({}), "__meta", "metadata topic", MIN_COMPACTION_LAG_MS)

"""The Kafka source's option contract, without a Spark session: every option Spark knows is taken
with Spark's meaning or refused with a clear error; an unknown option is an error."""

from __future__ import annotations

import pytest

from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.spark import check_pyspark_version
from processor.spark.bounds import Bound, time_string_ms
from processor.spark.options import SUPPORTED_OPTIONS, check_known_options
from processor.spark_sources.entry import record_options

pytestmark = pytest.mark.spark

ENV = {
    "PROCESSOR_BOOTSTRAP_SERVERS": "kafka:9092",
    "PROCESSOR_S3_BUCKET": "bucket-a",
    "PROCESSOR_METADATA_TOPIC": "meta",
}
TP = TopicPartition


def opts(mode: str = "batch", **options: str):
    return record_options(options, ENV, mode=mode)  # type: ignore[arg-type]


def test_connection_falls_back_to_the_worker_environment() -> None:
    o = record_options({"subscribe": "a,b", "s3.prefix": "x/y"}, ENV)
    assert o.subscription.topics == ("a", "b") and o.connection.bootstrap_servers == "kafka:9092"
    assert (o.connection.s3_bucket, o.connection.s3_prefix, o.connection.metadata_topic) == (
        "bucket-a",
        "x/y",
        "meta",
    )


def test_an_unknown_or_misspelled_option_is_an_error_listing_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match="startingoffset") as err:
        opts(subscribe="t", startingOffset="earliest")
    for name in ("startingOffsets", "subscribePattern", "maxRecordsPerPartition", "includeHeaders"):
        assert name in str(err.value)
    check_known_options({"subscribe": "t", "kafka.fetch.max.bytes": "1000", "STARTINGOFFSETS": "earliest"})
    assert "minOffsetsPerTrigger" in SUPPORTED_OPTIONS and "kafka.bootstrap.servers" in SUPPORTED_OPTIONS


def test_exactly_one_subscription_and_each_kind_parsed() -> None:
    with pytest.raises(ConfigError, match="One of the options assign, subscribe, subscribePattern"):
        opts()
    with pytest.raises(ConfigError, match="Only one"):
        opts(subscribe="a", subscribePattern="a.*")
    assert opts(assign='{"t":[1,0],"u":[2]}').subscription.assign == (TP("t", 0), TP("t", 1), TP("u", 2))
    pattern = opts(subscribePattern="orders-[0-9]+").subscription
    assert pattern.matches_topic("orders-12") and not pattern.matches_topic("orders-12x")
    for bad in ({"subscribe": " , "}, {"assign": '{"t":0}'}, {"assign": "[]"}, {"subscribePattern": "("}):
        with pytest.raises(ConfigError):
            opts(**bad)


def test_bounds_follow_sparks_preference_and_batch_rules() -> None:
    o = opts(
        subscribe="t",
        startingTimestamp="5",
        startingOffsetsByTimestamp='{"t":{"0":1}}',
        startingOffsets="earliest",
    )
    assert o.starting == Bound("timestamp", timestamp=5)
    o = opts(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":1}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps" and o.starting.timestamp_map == {TP("t", 0): 1}
    o = opts(subscribe="t", startingOffsets='{"t":{"0":5,"1":-2}}', endingOffsets='{"t":{"0":9,"1":-1}}')
    assert o.starting.offset_map == {TP("t", 0): 5, TP("t", 1): -2} and o.ending.offset_map[TP("t", 1)] == -1
    assert (
        opts(subscribe="t").starting.kind == "earliest"
        and opts("stream", subscribe="t").starting.kind == "latest"
    )
    for bad, match in (
        ({"startingOffsets": "latest"}, "can't be latest for batch"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "can't be latest for batch"),
        ({"endingOffsets": "earliest"}, "can't be earliest for batch"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, "can't be earliest"),
        ({"startingOffsets": '{"t":{"0":1}}', "endingOffsets": '{"t":{"1":1}}'}, "different partitions"),
        ({"startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":3}}'}, "above the ending"),
        ({"startingOffsets": '{"t":{"0":-3}}'}, "offsets are >= 0"),
        ({"startingOffsets": '{"t":[0]}'}, "expected e.g."),
        ({"startingTimestamp": "soon"}, "whole number"),
        ({"startingOffsetsByTimestampStrategy": "maybe"}, "error or latest"),
    ):
        with pytest.raises(ConfigError, match=match):
            opts(subscribe="t", **bad)
    assert opts(subscribe="t", startingOffsetsByTimestampStrategy="LATEST").no_match_latest


def test_stream_only_and_batch_only_options() -> None:
    endings = {"endingOffsets": "latest", "endingTimestamp": "1", "endingOffsetsByTimestamp": '{"t":{"0":1}}'}
    for name, value in endings.items():
        with pytest.raises(ConfigError, match="not valid in streaming queries"):
            opts("stream", subscribe="t", **{name: value})
    o = opts(subscribe="t", maxOffsetsPerTrigger="10")  # batch: ignored with a warning, as Spark
    assert o.warnings == ("maxOffsetsPerTrigger option ignored in batch queries",)
    s = opts(
        "stream", subscribe="t", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="4", maxTriggerDelay="2m"
    )
    assert (s.max_offsets_per_trigger, s.min_offsets_per_trigger, s.max_trigger_delay_ms) == (10, 4, 120_000)
    with pytest.raises(ConfigError, match=r"minOffsetPerTrigger\(11\) is higher"):
        opts("stream", subscribe="t", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="11")
    assert time_string_ms("d", "15m") == 900_000 and time_string_ms("d", "250") == 250
    assert time_string_ms("d", "2h") == 7_200_000 and time_string_ms("d", "10s") == 10_000
    with pytest.raises(ConfigError):
        time_string_ms("maxTriggerDelay", "soon")


def test_partitioning_headers_groups_and_data_loss_options() -> None:
    o = opts(
        subscribe="t",
        minPartitions="8",
        maxRecordsPerPartition="1000",
        includeHeaders="true",
        failOnDataLoss="false",
    )
    assert (o.min_partitions, o.max_records_per_partition, o.include_headers, o.fail_on_data_loss) == (
        8,
        1000,
        True,
        False,
    )
    assert not opts(subscribe="t").include_headers and opts(subscribe="t").fail_on_data_loss
    for bad in (
        {"minPartitions": "0"},
        {"maxRecordsPerPartition": "-1"},
        {"includeHeaders": "yes"},
        {"tail": "dead"},
    ):
        with pytest.raises(ConfigError):
            opts(subscribe="t", **bad)
    assert opts(subscribe="t", groupIdPrefix="mine").group_id.startswith("mine-")
    assert opts(subscribe="t").group_id.startswith("spark-kafka-relation-")
    assert opts("stream", subscribe="t").group_id.startswith("spark-kafka-source-")
    given = opts(subscribe="t", groupIdPrefix="mine", **{"kafka.group.id": "fixed"})
    assert given.group_id == "fixed" and any("groupIdPrefix will be ignored" in w for w in given.warnings)


def test_kafka_settings_pass_through_in_one_place_and_sparks_refusals_hold(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    o = opts(
        subscribe="t",
        **{
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="u" password="p";',
            "kafka.ssl.ca.location": str(ca),
            "kafka.fetch.max.bytes": "1048576",
            "kafka.isolation.level": "read_committed",
        },
    )
    # security goes to KafkaSecurity (every client's security comes from there), the rest through
    assert dict(o.connection.kafka_settings) == {"fetch.max.bytes": "1048576"}
    security = o.connection.kafka.security
    assert (str(security.protocol), str(security.sasl_mechanism), security.sasl_username) == (
        "SASL_SSL",
        "PLAIN",
        "u",
    )
    assert security.ssl_cafile == str(ca) and o.connection.bootstrap_servers == "kafka:9092"
    config = o.connection.kafka.security.librdkafka_config()
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.username"] == "u"
    with pytest.raises(ConfigError, match=r"JKS|PEM"):
        opts(subscribe="t", **{"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/t.jks"})
    with pytest.raises(ConfigError, match="read_committed consumer sees"):
        opts(subscribe="t", **{"kafka.isolation.level": "read_uncommitted"})
    for name in (
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "enable.auto.commit",
        "interceptor.classes",
    ):
        with pytest.raises(ConfigError, match=f"Kafka option '{name}' is not supported"):
            opts(subscribe="t", **{f"kafka.{name}": "x"})


def test_pyspark_older_than_4_2_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"pyspark 4\.1\.1 is too old.*>= 4\.2"):
        check_pyspark_version("4.1.1")
    check_pyspark_version("4.2.0")
    check_pyspark_version("4.3.0.dev1")


def test_the_docs_table_names_every_supported_option() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    table = doc[doc.index("| option | Spark's meaning | here |") : doc.index("\n## Streams")]
    first_cells = " ".join(row.split("|")[1] for row in table.splitlines()[2:] if row.startswith("|"))
    assert [name for name in SUPPORTED_OPTIONS if f"`{name}`" not in first_cells] == []

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import InvalidNameError
from processor.segment.object_keys import ObjectKeyFactory, validate_prefix, validate_topic


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ".", "", "a b", "x" * 250, "t\x00", "/abs", "a\\b"])
def test_bad_topic_names_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_topic(bad)


@pytest.mark.parametrize("bad", ["a/../b", "./a", "a//b", "a/ b", "..", "a/\x00"])
def test_bad_prefixes_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_prefix(bad)


def test_prefix_is_normalised() -> None:
    assert validate_prefix("/tenants/a/") == "tenants/a"
    assert validate_prefix("") == ""


@given(st.text(max_size=60), st.integers(0, 10_000), st.integers(0, 2**40), st.integers(0, 1000))
def test_keys_never_escape_the_prefix(topic: str, partition: int, start: int, epoch: int) -> None:
    keys = ObjectKeyFactory("tenants/a")
    try:
        k = keys.segment(topic, partition, start, uuid.uuid4(), epoch)
    except InvalidNameError:
        return
    for key in (k.data, k.index):
        assert key.startswith(f"tenants/a/{topic}/{partition}/")
        assert ".." not in key.split("/")
        assert key.count("/") == 4
    assert k.index == k.data + "-index"


def test_keys_sort_by_start_offset_and_carry_uuid_and_epoch() -> None:
    keys = ObjectKeyFactory("")
    sid = uuid.uuid4()
    a = keys.segment("t", 0, 9, sid, 3).data
    b = keys.segment("t", 0, 10, uuid.uuid4(), 3).data
    assert a < b and str(sid) in a and a.endswith("-e3.log") and a.startswith("t/0/")


def test_a_segments_key_filter_is_its_object_and_deleted_last() -> None:
    keys = ObjectKeyFactory("p")
    sid = uuid.uuid4()
    k = keys.segment("t", 1, 0, sid, 4)
    assert k.key_filter == k.data + "-keys"
    assert k.in_delete_order() == (k.manifest, k.data, k.index, k.key_filter)
    assert keys.is_project_key(k.key_filter)
    assert keys.segment_name(k.key_filter) == (sid, 4, k.data)
    assert not keys.is_project_key(k.data + "-keys-index")


def test_metadata_keys_are_checked_before_use() -> None:
    keys = ObjectKeyFactory("p")
    good = keys.segment("t", 1, 0, uuid.uuid4(), 0)
    assert keys.check_segment_key(good.data, "t", 1) == good.data
    assert keys.check_segment_key(good.index, "t", 1) == good.index
    for bad in [
        "p/t/1/../../other/x",
        "other/t/1/" + good.data.split("/")[-1],
        good.data.replace("p/t/1", "p/t/2"),
    ]:
        with pytest.raises(InvalidNameError):
            keys.check_segment_key(bad, "t", 1)


def test_keys_carry_the_topic_id_and_old_keys_stay_readable() -> None:
    keys = ObjectKeyFactory("p")
    tid = str(uuid.uuid4())
    new = keys.segment("t-1", 2, 5, uuid.uuid4(), 1, tid)
    assert new.data.startswith(f"p/t-1-{tid}/2/")
    assert keys.check_segment_key(new.data, "t-1", 2) == new.data
    assert keys.check_segment_key(new.index, "t-1", 2) == new.index
    old = keys.segment("t-1", 2, 5, uuid.uuid4(), 1)
    assert old.data.startswith("p/t-1/2/") and keys.check_segment_key(old.data, "t-1", 2) == old.data
    for bad in (
        new.data.replace("/2/", "/3/"),  # another partition
        f"p/t-1-{tid}x/2/" + new.data.rsplit("/", 1)[1],  # not a uuid
        f"p/t-1-{tid}/../2/" + new.data.rsplit("/", 1)[1],
    ):
        with pytest.raises(InvalidNameError):
            keys.check_segment_key(bad, "t-1", 2)
    with pytest.raises(InvalidNameError):
        keys.segment("t", 0, 0, uuid.uuid4(), 0, "../x")


def test_partition_of_recognises_every_folder_of_a_topic_and_nothing_else():
    from processor.segment.object_keys import ObjectKeyFactory

    keys = ObjectKeyFactory("pre")
    tid = "01a20270-d3cf-7e83-82b4-da1b9798c132"
    assert keys.topic_listing_prefix("orders") == "pre/orders"
    assert keys.partition_of("orders", "pre/orders/3/0001.log") == 3
    assert keys.partition_of("orders", f"pre/orders-{tid}/7/0001.log") == 7
    assert keys.partition_of("orders", "pre/orders2/3/0001.log") is None
    assert keys.partition_of("orders", "pre/orders-x/3/0001.log") is None
    seg = keys.segment("orders", 5, 0, __import__("uuid").uuid4(), 1, tid)
    assert keys.partition_of("orders", seg.data) == 5

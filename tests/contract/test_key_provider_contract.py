"""One contract, run unchanged against every KeyProvider: the key ring in a directory, and KMS
(moto's KMS in server mode, reached through a real boto3 client over HTTP)."""

from __future__ import annotations

import base64
import json
import os
import stat
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from processor.crypto.keyring import KeyringProvider, new_key
from processor.crypto.keys import (
    EncryptionContext,
    KeyAccessError,
    KeyConfigError,
    KeyProvider,
    KeyShreddedError,
    WrappedKey,
)
from processor.crypto.kms import KmsProvider, kms_client, kms_error
from tests.support.kms_server import moto_kms

REGION = "us-east-1"
DUMMY = {"access_key_id": "testing", "secret_access_key": "testing"}


@pytest.fixture(scope="module")
def kms_endpoint() -> Iterator[str]:
    with moto_kms() as endpoint:
        yield endpoint


@dataclass
class Ring:
    """A provider and the means to change its keys the way an operator would."""

    provider: KeyProvider
    new_default: Callable[[], str]  # a new current default key; ``provider`` then uses it
    new_topic_key: Callable[[str], str]  # a key of the topic's own; ``provider`` then uses it
    destroyed: Callable[[str], bool]  # whether the key itself is gone or disabled
    extra: dict[str, Any] = field(default_factory=dict)


def keyring_ring(directory: Path) -> Ring:
    new_key(directory)
    return Ring(
        provider=KeyringProvider(directory),
        # the same instance: it sees keys added to the directory
        new_default=lambda: new_key(directory),
        new_topic_key=lambda topic: new_key(directory, topic),
        destroyed=lambda key_id: not (directory / f"{key_id}.key").exists(),
    )


def kms_ring(endpoint: str) -> Ring:
    client = kms_client(REGION, endpoint, **DUMMY)

    def create() -> str:
        return str(client.create_key(Description="key provider contract")["KeyMetadata"]["KeyId"])

    state: dict[str, Any] = {"default": create(), "topics": {}}

    def rebuild() -> None:
        # a new provider instance over the same KMS, as after a configuration change
        harness.provider = KmsProvider(client, state["default"], dict(state["topics"]))

    def new_default() -> str:
        state["default"] = create()
        rebuild()
        return str(state["default"])

    def new_topic_key(topic: str) -> str:
        state["topics"][topic] = create()
        rebuild()
        return str(state["topics"][topic])

    def destroyed(key_id: str) -> bool:
        meta = client.describe_key(KeyId=key_id)["KeyMetadata"]
        return meta["KeyState"] == "PendingDeletion" and not meta["Enabled"]

    harness = Ring(KmsProvider(client, state["default"], {}), new_default, new_topic_key, destroyed)
    harness.extra.update(client=client, endpoint=endpoint, state=state)
    return harness


@pytest.fixture(params=["keyring", "kms"])
def ring(request: pytest.FixtureRequest, tmp_path: Path) -> Ring:
    if request.param == "keyring":
        return keyring_ring(tmp_path / "keys")
    return kms_ring(request.getfixturevalue("kms_endpoint"))


def context(topic: str = "orders", partition: int = 3) -> EncryptionContext:
    return EncryptionContext(topic, str(uuid.uuid4()), partition, str(uuid.uuid4()))


# --- the contract -------------------------------------------------------------------------------


def test_new_data_key_is_32_random_bytes_that_unwrap(ring: Ring) -> None:
    ctx = context()
    first, second = ring.provider.new_data_key(ctx), ring.provider.new_data_key(ctx)
    assert len(first.plaintext) == 32 and len(second.plaintext) == 32
    assert first.plaintext != second.plaintext
    assert first.wrapped.blob != second.wrapped.blob
    assert first.wrapped.provider == ring.provider.name
    assert first.wrapped.key_id == ring.provider.current_key_id(ctx.topic)
    assert ring.provider.unwrap(first.wrapped, ctx) == first.plaintext
    assert ring.provider.unwrap(second.wrapped, ctx) == second.plaintext
    # the plaintext never shows
    for text in (repr(first), str(first)):
        assert first.plaintext.hex() not in text
        assert repr(first.plaintext)[2:-1] not in text


@pytest.mark.parametrize("change", ["topic", "topic_id", "partition", "segment_id"])
def test_another_context_does_not_unwrap(ring: Ring, change: str) -> None:
    ctx = context()
    data_key = ring.provider.new_data_key(ctx)
    other = {
        "topic": replace(ctx, topic="payments"),
        "topic_id": replace(ctx, topic_id=str(uuid.uuid4())),
        "partition": replace(ctx, partition=4),
        "segment_id": replace(ctx, segment_id=str(uuid.uuid4())),
    }[change]
    with pytest.raises(KeyAccessError) as caught:
        ring.provider.unwrap(data_key.wrapped, other)
    assert not isinstance(caught.value, KeyShreddedError)
    assert data_key.wrapped.key_id in str(caught.value)
    assert other.segment_id in str(caught.value)


def test_tampered_blob_does_not_unwrap(ring: Ring) -> None:
    ctx = context()
    wrapped = ring.provider.new_data_key(ctx).wrapped
    blob = bytearray(wrapped.blob)
    blob[len(blob) // 2] ^= 0x01
    with pytest.raises(KeyAccessError):
        ring.provider.unwrap(replace(wrapped, blob=bytes(blob)), ctx)


def test_unknown_key_id_is_a_key_access_error(ring: Ring) -> None:
    ctx = context()
    wrapped = ring.provider.new_data_key(ctx).wrapped
    unknown = "k-19700101T000000000Z-000000000000" if ring.provider.name == "keyring" else str(uuid.uuid4())
    with pytest.raises(KeyAccessError) as caught:
        ring.provider.unwrap(replace(wrapped, key_id=unknown), ctx)
    assert unknown in str(caught.value)


def test_another_providers_record_is_a_config_error(ring: Ring) -> None:
    ctx = context()
    wrapped = ring.provider.new_data_key(ctx).wrapped
    other = "kms" if ring.provider.name == "keyring" else "keyring"
    with pytest.raises(KeyConfigError, match=f"{other} provider"):
        ring.provider.unwrap(replace(wrapped, provider=other), ctx)


def test_wrapped_key_encodes_and_decodes(ring: Ring) -> None:
    ctx = context()
    data_key = ring.provider.new_data_key(ctx)
    encoded = data_key.wrapped.encode()
    assert len(encoded) <= 1024
    decoded = WrappedKey.decode(encoded, where="segment x")
    assert decoded == data_key.wrapped
    assert ring.provider.unwrap(decoded, ctx) == data_key.plaintext


def test_rewrap_moves_to_the_new_current_key_and_keeps_the_plaintext(ring: Ring) -> None:
    ctx = context()
    data_key = ring.provider.new_data_key(ctx)
    old_key_id = data_key.wrapped.key_id
    assert ring.provider.rewrap(data_key.wrapped, ctx) is data_key.wrapped  # already current

    new_key_id = ring.new_default()
    assert new_key_id != old_key_id
    assert ring.provider.current_key_id(ctx.topic) == new_key_id
    moved = ring.provider.rewrap(data_key.wrapped, ctx)
    assert moved.key_id == new_key_id
    assert moved.blob != data_key.wrapped.blob
    assert ring.provider.unwrap(moved, ctx) == data_key.plaintext
    assert ring.provider.rewrap(moved, ctx) is moved  # idempotent
    # the old key still unwraps what it wrapped (nothing is rewrapped behind a reader's back)
    assert ring.provider.unwrap(data_key.wrapped, ctx) == data_key.plaintext
    # a rewrapped record is still bound to its context
    with pytest.raises(KeyAccessError):
        ring.provider.unwrap(moved, replace(ctx, segment_id=str(uuid.uuid4())))
    # new data keys use the new key
    assert ring.provider.new_data_key(context()).wrapped.key_id == new_key_id


def test_a_topic_key_serves_that_topic_only(ring: Ring) -> None:
    default = ring.provider.current_key_id("orders")
    topic_key = ring.new_topic_key("orders")
    assert ring.provider.current_key_id("orders") == topic_key
    assert ring.provider.current_key_id("payments") == default

    orders, payments = context("orders"), context("payments")
    orders_key = ring.provider.new_data_key(orders)
    payments_key = ring.provider.new_data_key(payments)
    assert orders_key.wrapped.key_id == topic_key
    assert payments_key.wrapped.key_id == default
    assert ring.provider.unwrap(orders_key.wrapped, orders) == orders_key.plaintext
    assert ring.provider.unwrap(payments_key.wrapped, payments) == payments_key.plaintext


def test_rewrap_to_a_topic_key(ring: Ring) -> None:
    ctx = context("orders")
    data_key = ring.provider.new_data_key(ctx)
    topic_key = ring.new_topic_key("orders")
    moved = ring.provider.rewrap(data_key.wrapped, ctx)
    assert moved.key_id == topic_key
    assert ring.provider.unwrap(moved, ctx) == data_key.plaintext
    assert ring.provider.rewrap(moved, ctx) is moved
    other = context("payments")
    shared = ring.provider.new_data_key(other)
    assert ring.provider.rewrap(shared.wrapped, other) is shared.wrapped


def test_shred_destroys_the_topic_key_only(ring: Ring) -> None:
    topic_key = ring.new_topic_key("orders")
    audit_key = ring.new_topic_key("audit")
    orders, payments, audit = context("orders"), context("payments"), context("audit")
    assert ring.provider.new_data_key(orders).wrapped.key_id == topic_key
    payments_key = ring.provider.new_data_key(payments)
    audit_data_key = ring.provider.new_data_key(audit)

    assert ring.provider.shred_topic("orders") == topic_key
    assert ring.destroyed(topic_key)
    # the shared default key and other topics' own keys live on
    assert not ring.destroyed(payments_key.wrapped.key_id)
    assert not ring.destroyed(audit_key)
    assert ring.provider.unwrap(payments_key.wrapped, payments) == payments_key.plaintext
    assert ring.provider.unwrap(audit_data_key.wrapped, audit) == audit_data_key.plaintext
    assert ring.provider.new_data_key(context("payments")).wrapped.key_id == payments_key.wrapped.key_id
    assert ring.provider.new_data_key(context("audit")).wrapped.key_id == audit_key


def test_unwrap_after_shred_raises_key_shredded(ring: Ring) -> None:
    ring.new_topic_key("orders")
    orders = context("orders")
    orders_key = ring.provider.new_data_key(orders)
    ring.provider.shred_topic("orders")
    try:
        ring.provider.unwrap(orders_key.wrapped, orders)
    except KeyShreddedError as exc:
        assert orders_key.wrapped.key_id in str(exc)
        assert orders.segment_id in str(exc)
    else:
        # KMS refuses Decrypt under a disabled or pending-deletion key (DisabledException,
        # KMSInvalidStateException); moto's KMS decrypts anyway. Only the provider's answer to
        # those codes is checked then (test_kms_error_codes_map_to_key_errors).
        assert ring.provider.name == "kms", "the key ring unwrapped a shredded key"
        assert ring.destroyed(orders_key.wrapped.key_id)
        pytest.skip("moto's KMS decrypts under a key scheduled for deletion (real KMS refuses)")


def test_shred_without_a_topic_key_is_a_config_error(ring: Ring) -> None:
    ctx = context("payments")
    shared = ring.provider.new_data_key(ctx)
    with pytest.raises(KeyConfigError, match=r"no .*key of its own"):
        ring.provider.shred_topic("payments")
    assert not ring.destroyed(shared.wrapped.key_id)
    assert ring.provider.unwrap(shared.wrapped, ctx) == shared.plaintext


def test_a_topic_ids_own_key_wraps_that_incarnation_only_and_shreds_alone(ring: Ring) -> None:
    """A topic deleted and re-created is another topic id: its earlier incarnation can have a key of
    its own (scope ``topic@topic_id``), used for that id only, and shredded without the live one."""
    old_id, live_id = str(uuid.uuid4()), str(uuid.uuid4())
    topic_key = ring.new_topic_key("orders")
    old_key = ring.new_topic_key(f"orders@{old_id}")
    old = replace(context("orders"), topic_id=old_id)
    live = replace(context("orders"), topic_id=live_id)
    assert ring.provider.current_key_id("orders", old_id) == old_key
    assert ring.provider.current_key_id("orders", live_id) == topic_key
    old_data, live_data = ring.provider.new_data_key(old), ring.provider.new_data_key(live)
    assert (old_data.wrapped.key_id, live_data.wrapped.key_id) == (old_key, topic_key)
    assert ring.provider.rewrap(live_data.wrapped, live) is live_data.wrapped  # already current

    assert ring.provider.shred_topic(f"orders@{old_id}") == old_key
    assert ring.destroyed(old_key) and not ring.destroyed(topic_key)
    assert ring.provider.unwrap(live_data.wrapped, live) == live_data.plaintext
    assert ring.provider.new_data_key(replace(live, segment_id=str(uuid.uuid4()))).wrapped.key_id == topic_key


# --- the key ring only --------------------------------------------------------------------------


def test_keyring_files(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    key_id = new_key(directory, "orders")
    path = directory / f"{key_id}.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["key_id"] == key_id and doc["topic"] == "orders"
    assert len(base64.b64decode(doc["material"])) == 32
    assert key_id.startswith("k-")
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temporary file left
    provider = KeyringProvider(directory)
    assert doc["material"] not in repr(provider)
    with pytest.raises(KeyConfigError, match="no default key"):
        provider.new_data_key(context("payments"))


def test_keyring_shred_writes_a_tombstone_and_stays_shredded(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    new_key(directory)
    provider = KeyringProvider(directory)
    first = new_key(directory, "orders")
    ctx = context("orders")
    old = provider.new_data_key(ctx)
    second = new_key(directory, "orders")
    assert provider.shred_topic("orders") == second
    tombstone = json.loads((directory / "shredded" / "orders.json").read_text())
    assert tombstone["topic"] == "orders" and set(tombstone["key_ids"]) == {first, second}
    assert isinstance(tombstone["shredded_ms"], int)
    with pytest.raises(KeyShreddedError):
        provider.unwrap(old.wrapped, ctx)
    # no silent fall back to the shared key for a shredded topic, and no second shred
    with pytest.raises(KeyShreddedError):
        provider.new_data_key(context("orders"))
    with pytest.raises(KeyConfigError, match="shredded before"):
        provider.shred_topic("orders")
    # a new key of its own: the topic is written again; old data stays shredded
    third = new_key(directory, "orders")
    assert provider.new_data_key(context("orders")).wrapped.key_id == third
    with pytest.raises(KeyShreddedError):
        KeyringProvider(directory).unwrap(old.wrapped, ctx)


def test_keyring_newest_key_wins(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    directory.mkdir()
    for key_id, created_ms in (("k-b", 5), ("k-a", 5), ("k-c", 4)):
        record = {
            "version": 1,
            "key_id": key_id,
            "created_ms": created_ms,
            "topic": None,
            "material": base64.b64encode(os.urandom(32)).decode(),
        }
        (directory / f"{key_id}.key").write_text(json.dumps(record))
    assert KeyringProvider(directory).current_key_id("orders") == "k-b"


@pytest.mark.parametrize(
    "mangle, problem",
    [
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(material=base64.b64encode(b"short").decode()), "material is 5 bytes"),
        (lambda d: d.update(material="not base64!"), "base64"),
        (lambda d: d.update(key_id="k-other"), "file name"),
        (lambda d: d.update(created_ms="yesterday"), "created_ms"),
        (lambda d: d.update(topic=7), "topic"),
        (lambda d: d.pop("material"), "material missing"),
        (lambda d: d.update(extra=1), "unknown fields"),
    ],
)
def test_keyring_rejects_malformed_key_files(
    tmp_path: Path, mangle: Callable[[dict[str, Any]], Any], problem: str
) -> None:
    directory = tmp_path / "keys"
    key_id = new_key(directory)
    path = directory / f"{key_id}.key"
    doc = json.loads(path.read_text())
    material = doc["material"]
    mangle(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyConfigError, match=problem) as caught:
        KeyringProvider(directory).current_key_id("orders")
    assert str(path) in str(caught.value)
    assert material not in str(caught.value)


def test_keyring_rejects_a_key_file_that_is_not_json(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    key_id = new_key(directory)
    path = directory / f"{key_id}.key"
    material = json.loads(path.read_text())["material"]
    path.write_text('{"material": "' + material + '", ')
    with pytest.raises(KeyConfigError, match="not a JSON document") as caught:
        KeyringProvider(directory).current_key_id("orders")
    assert str(path) in str(caught.value) and material not in str(caught.value)


def test_keyring_refuses_topic_names_that_leave_the_directory(tmp_path: Path) -> None:
    from processor.errors import InvalidNameError

    directory = tmp_path / "keys"
    new_key(directory)
    with pytest.raises(InvalidNameError):
        new_key(directory, "../x")
    with pytest.raises(InvalidNameError):
        KeyringProvider(directory).shred_topic("..")


# --- KMS only -----------------------------------------------------------------------------------


def test_kms_refuses_aliases(kms_endpoint: str) -> None:
    client = kms_client(REGION, kms_endpoint, **DUMMY)
    with pytest.raises(KeyConfigError, match="alias"):
        KmsProvider(client, "alias/processor", {})
    with pytest.raises(KeyConfigError, match="alias"):
        KmsProvider(client, str(uuid.uuid4()), {"orders": "arn:aws:kms:us-east-1:1:alias/x"})


def test_kms_shred_of_a_key_shared_with_another_topic_is_a_config_error(kms_endpoint: str) -> None:
    client = kms_client(REGION, kms_endpoint, **DUMMY)
    default = client.create_key()["KeyMetadata"]["KeyId"]
    shared = client.create_key()["KeyMetadata"]["KeyId"]
    provider = KmsProvider(client, default, {"orders": shared, "payments": shared, "audit": default})
    with pytest.raises(KeyConfigError, match="payments"):
        provider.shred_topic("orders")
    with pytest.raises(KeyConfigError, match="no KMS key of its own"):
        provider.shred_topic("audit")
    assert client.describe_key(KeyId=shared)["KeyMetadata"]["Enabled"]


def test_kms_shred_twice_is_done_once(kms_endpoint: str) -> None:
    client = kms_client(REGION, kms_endpoint, **DUMMY)
    default = client.create_key()["KeyMetadata"]["KeyId"]
    own = client.create_key()["KeyMetadata"]["KeyId"]
    provider = KmsProvider(client, default, {"orders": own})
    assert provider.shred_topic("orders") == own
    assert provider.shred_topic("orders") == own  # already scheduled: nothing more to do
    meta = client.describe_key(KeyId=own)["KeyMetadata"]
    assert meta["KeyState"] == "PendingDeletion"


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10):
        pass


def test_kms_a_principal_without_decrypt_is_denied(kms_endpoint: str) -> None:
    """A real denial: moto's server checks the IAM user's policy once authentication is on."""
    iam = boto3.client(
        "iam",
        endpoint_url=kms_endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    admin = kms_client(REGION, kms_endpoint, **DUMMY)
    key_id = admin.create_key()["KeyMetadata"]["KeyId"]
    user = f"writer-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    iam.put_user_policy(
        UserName=user,
        PolicyName="generate-only",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": ["kms:GenerateDataKey"], "Resource": "*"}],
            }
        ),
    )
    creds = iam.create_access_key(UserName=user)["AccessKey"]
    writer = KmsProvider(
        kms_client(
            REGION,
            kms_endpoint,
            access_key_id=creds["AccessKeyId"],
            secret_access_key=creds["SecretAccessKey"],
        ),
        key_id,
        {},
    )
    ctx = context()
    _post(f"{kms_endpoint}/moto-api/reset-auth", b"0")  # authenticate and authorize from now on
    try:
        data_key = writer.new_data_key(ctx)  # allowed
        try:
            writer.unwrap(data_key.wrapped, ctx)
        except KeyAccessError as exc:
            denied: KeyAccessError | None = exc
        else:
            denied = None
    finally:
        _post(f"{kms_endpoint}/moto-api/reset-auth", b"inf")
    if denied is None:
        pytest.skip("this moto does not enforce IAM policies on KMS Decrypt")
    assert not isinstance(denied, KeyShreddedError)
    assert not denied.retriable
    assert "kms:Decrypt" in str(denied) and key_id in str(denied)
    assert ctx.segment_id in str(denied)
    # the key itself is fine: a principal that may decrypt does
    assert KmsProvider(admin, key_id, {}).unwrap(data_key.wrapped, ctx) == data_key.plaintext


def test_kms_a_record_naming_another_key_is_denied(kms_endpoint: str) -> None:
    """Decrypt with KeyId = a key that did not wrap the blob: KMS refuses (moto: AccessDenied)."""
    client = kms_client(REGION, kms_endpoint, **DUMMY)
    first = client.create_key()["KeyMetadata"]["KeyId"]
    second = client.create_key()["KeyMetadata"]["KeyId"]
    provider = KmsProvider(client, first, {})
    ctx = context()
    wrapped = provider.new_data_key(ctx).wrapped
    with pytest.raises(KeyAccessError) as caught:
        provider.unwrap(replace(wrapped, key_id=second), ctx)
    assert not isinstance(caught.value, KeyShreddedError)
    assert second in str(caught.value)


def _client_error(code: str, status: int = 400, operation: str = "Decrypt") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"{code} message"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


@pytest.mark.parametrize(
    "code, status, kind, retriable, words",
    [
        ("AccessDeniedException", 400, KeyAccessError, False, "needs kms:Decrypt on key-1"),
        ("DisabledException", 400, KeyShreddedError, False, "disabled or scheduled for deletion (shredded?)"),
        ("KMSInvalidStateException", 400, KeyShreddedError, False, "disabled or scheduled for deletion"),
        ("NotFoundException", 400, KeyAccessError, False, "not found"),
        ("InvalidCiphertextException", 400, KeyAccessError, False, "encryption context"),
        ("IncorrectKeyException", 400, KeyAccessError, False, "does not decrypt under key-1"),
        ("ThrottlingException", 400, KeyAccessError, True, "ThrottlingException"),
        ("KMSInternalException", 500, KeyAccessError, True, "KMSInternalException"),
        ("ValidationException", 400, KeyAccessError, False, "ValidationException"),
    ],
)
def test_kms_error_codes_map_to_key_errors(
    code: str, status: int, kind: type[KeyAccessError], retriable: bool, words: str
) -> None:
    ctx = context()
    error = kms_error(
        _client_error(code, status),
        operation="Decrypt",
        permission="kms:Decrypt",
        key_id="key-1",
        context=ctx,
    )
    assert type(error) is kind
    assert error.retriable is retriable
    assert words in str(error)
    assert "key=key-1" in str(error) and ctx.segment_id in str(error)


def test_kms_unreachable_is_retriable() -> None:
    error = kms_error(
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        operation="Decrypt",
        permission="kms:Decrypt",
        key_id="key-1",
        context=None,
    )
    assert type(error) is KeyAccessError and error.retriable


def test_kms_client_retries_in_standard_mode() -> None:
    client = kms_client(REGION, "http://127.0.0.1:1", **DUMMY)
    assert client.meta.config.retries == {"total_max_attempts": 5, "mode": "standard"}

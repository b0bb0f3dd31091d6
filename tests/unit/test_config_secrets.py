"""``processor config`` never prints a secret: SecretStr settings and URL passwords show ``***``."""

from __future__ import annotations

import json

from processor.commands.config_cmd import describe
from processor.config import load_settings
from processor.logs import MASK, mask_url_password


def test_url_passwords_are_masked() -> None:
    env = {"PROCESSOR_S3_ENDPOINT_URL": "https://minio:canary-url-pw@s3.local:9000/path"}
    report = describe(load_settings(env), env)
    text = json.dumps(report)
    assert "canary-url-pw" not in text
    row = next(r for r in report["settings"] if r["variable"] == "PROCESSOR_S3_ENDPOINT_URL")
    assert row["display"] == f"https://minio:{MASK}@s3.local:9000/path"


def test_urls_without_credentials_are_unchanged() -> None:
    for url in ("http://127.0.0.1:9000", "https://s3.amazonaws.com/a:b", "not a url", "s3://bucket/x@y"):
        assert mask_url_password(url) == url

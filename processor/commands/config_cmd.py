"""``processor config``: the effective configuration, where each value came from, secrets masked.

Sources: ``environment`` (a PROCESSOR_* variable), ``default``, or ``derived`` (a default that
adapted to another setting, e.g. the block size to a small PROCESSOR_SEGMENT_BYTES). Sizes and
durations are shown with units. Credentials of the AWS chain are listed by presence only; every
secret setting (a ``SecretStr``) shows ``***``, and so does the password inside a URL.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from processor.config import ENV_PREFIX, Settings, load_settings
from processor.logs import MASK, mask_url_password
from processor.units import format_duration_ms, format_size

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


def cmd_config(args: argparse.Namespace) -> int:
    settings = load_settings()
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
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=cmd_config)

"""The chart's example values (helm/kafka-tiered-processor/examples/) and chart-testing values (ci/).

Every file renders with `helm template`, every rendered manifest passes kubernetes-validate (strict),
and `helm lint --strict` passes with it; a bare `helm lint` of the chart's defaults passes too (the
install-time requirements are template `fail`s, which lint mode only logs: see ci/default-values.yaml).
helm comes from the `helm` fixture (conftest.py), which skips these tests when it cannot be installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, by_kind, config_map, render, render_error, run_helm, validate_all

EXAMPLES = CHART / "examples"
CI = CHART / "ci"
DOCUMENTED_EXAMPLES = {
    "msk-iam.yaml",
    "confluent-cloud.yaml",
    "minio.yaml",
    "scram-tls.yaml",
    "gke-workload-identity.yaml",
    "aks-workload-identity.yaml",
}
# Each store's setting naming where the archive is (config.storage), and its placeholder value
PLACEHOLDERS = {
    "s3": ("s3Bucket", "my-bucket"),
    "gcs": ("gcsBucket", "my-bucket"),
    "azure": ("azureContainer", "my-container"),
}
VALUES_FILES = sorted(EXAMPLES.glob("*.yaml")) + sorted(CI.glob("*.yaml"))
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _values(path: Path) -> dict[str, Any]:
    values = yaml.safe_load(path.read_text())
    assert isinstance(values, dict), f"{_id(path)} is not a values mapping"
    return values


def _header(path: Path) -> str:
    """The comment block the file starts with."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return "\n".join(lines)


def _secret_names(node: Any) -> set[str]:
    """Every Secret the values reference (keys named *Secret / *Secrets, non-empty)."""
    names: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("Secret") and isinstance(value, str) and value:
                names.add(value)
            elif key.endswith("Secrets") and isinstance(value, list):
                names |= {v for v in value if isinstance(v, str) and v}
            else:
                names |= _secret_names(value)
    return names


def test_examples_directory_has_the_documented_files():
    present = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert present >= DOCUMENTED_EXAMPLES, f"missing examples: {sorted(DOCUMENTED_EXAMPLES - present)}"
    assert sorted(CI.glob("*-values.yaml")), "ci/ holds no *-values.yaml for chart-testing"


def test_bare_helm_lint_passes(helm):
    """`helm lint helm/kafka-tiered-processor` with nothing else: the first thing a user runs."""
    proc = run_helm(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in proc.stdout


def test_install_still_requires_the_topics(helm):
    """The requirement moved from the schema to the templates, not away: a render without topics fails."""
    error = render_error(helm, "--set", "credentials.webToken.existingSecret=web-token")
    assert "config.topics" in error


@pytest.mark.parametrize("path", VALUES_FILES, ids=_id)
def test_values_file_renders_and_validates(helm, path):
    docs = render(helm, "-f", str(path))
    assert validate_all(docs) >= 5
    assert not by_kind(docs, "Secret"), "the chart only references Secrets"
    assert config_map(docs)["PROCESSOR_TOPICS"]


@pytest.mark.parametrize("path", VALUES_FILES, ids=_id)
def test_values_file_lints(helm, path):
    proc = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(path))
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("path", VALUES_FILES, ids=_id)
def test_values_file_passes_the_schema(path):
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    merged = _merge(defaults, _values(path))
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(merged)]
    assert errors == []


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_id)
def test_example_is_ready_to_copy(path):
    values = _values(path)
    header = _header(path)
    # what it is for, what must exist first, and the exact install line for this very file
    assert len(header.splitlines()) >= 5, f"{_id(path)} lacks its explanatory comment block"
    assert "must exist first" in header
    rel = path.relative_to(CHART.parents[1]).as_posix()
    assert f"helm install tiered helm/kafka-tiered-processor --namespace kafka-tiered -f {rel}" in header
    # the image is the user's own build: set explicitly, never the chart's non-existent default
    repository = values.get("image", {}).get("repository", "")
    default_repository = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    assert repository and repository != default_repository
    # every Secret the values reference is one the header says how to create
    for secret in _secret_names(values):
        assert f"secret generic {secret}" in header, f"{_id(path)}: how to create Secret {secret}?"
    # placeholders stay recognisable
    setting, placeholder = PLACEHOLDERS[values["config"].get("storage", "s3")]
    assert values["config"][setting] == placeholder


def _merge(base: Any, override: Any) -> Any:
    """Helm's coalescing of a values file over the defaults (maps merge, everything else replaces)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value)
        return out
    return override

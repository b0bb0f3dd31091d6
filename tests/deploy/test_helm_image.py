"""The chart's image: no image is published, so image.repository is the user's own build, required.

The default is empty and a render without it stops with a message saying to build, push and set it
(templates/_helpers.tpl "ktp.validate"), while a bare `helm lint` still passes (lint mode only logs
`fail`, as for config.topics). Every pod runs the image set, the audit its "-spark" tag.
"""

from __future__ import annotations

import json

import yaml

from tests.deploy.chart import (
    BASE,
    CHART,
    REPOSITORY,
    TOPICS,
    pod_specs,
    render,
    render_error,
    run_helm,
)

WEB_TOKEN = ["--set", "credentials.webToken.existingSecret=web-token"]


def test_no_default_repository():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == ""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["image"]
    assert "repository" in schema["required"]
    assert "minLength" not in schema["properties"]["repository"], "an empty default must pass the schema"


def test_install_without_a_repository_says_to_build_push_and_set_it(helm):
    error = render_error(helm, *TOPICS, *WEB_TOKEN)
    assert "image.repository" in error
    assert "docker build" in error and "push" in error


def test_bare_helm_lint_still_passes(helm):
    proc = run_helm(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in proc.stdout


def test_every_pod_runs_the_image_set(helm):
    docs = render(
        helm,
        *BASE,
        "--set",
        "image.tag=1.2.3",
        "--set",
        "followers.enabled=true",
        "--set",
        "audit.enabled=true",
    )
    images = {c["image"] for spec in pod_specs(docs) for c in spec["containers"]}
    audits = [d for d in docs if d["kind"] == "CronJob"]
    audit = {
        c["image"] for d in audits for c in d["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    }
    assert audit == {f"{REPOSITORY}:1.2.3-spark"}
    assert images == {f"{REPOSITORY}:1.2.3", f"{REPOSITORY}:1.2.3-spark"}

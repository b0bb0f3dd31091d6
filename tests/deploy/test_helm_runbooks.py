"""The runbooks ship with the chart: helm/kafka-tiered-processor/runbooks/ is a byte-identical copy of
docs/runbooks/, rendered with the PrometheusRule into the ConfigMap ``<fullname>-runbooks`` (one key
per alert, ``<AlertName>.md``, plus README.md). With ``runbookBaseUrl`` empty (the default) each
alert's ``runbook`` annotation is the kubectl command printing its page from that ConfigMap (run
here against the rendered ConfigMap with ``kubectl label --local``, which needs no cluster); set, each
alert's ``runbook_url`` is ``<runbookBaseUrl>/<AlertName>.md``.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import BASE, CHART, PROMETHEUS_RULE, by_kind, named, render, render_error
from tests.deploy.k8s_tools import ROOT

DOCS_RUNBOOKS = ROOT / "docs" / "runbooks"
CHART_RUNBOOKS = CHART / "runbooks"
RESYNC = "cp docs/runbooks/*.md helm/kafka-tiered-processor/runbooks/"
NS = "tiered"
FULL = "rel-kafka-tiered-processor"
CONFIGMAP = f"{FULL}-runbooks"
# A ConfigMap holds at most 1 MiB (etcd's object limit); the runbooks must stay far below it.
CONFIGMAP_LIMIT = 1024 * 1024
CONFIGMAP_BUDGET = CONFIGMAP_LIMIT // 4
WITH_AUDIT = [*BASE, "--set", "audit.enabled=true", *PROMETHEUS_RULE]


def _pages(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.md"))}


def _alerts(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (rule,) = by_kind(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


@pytest.fixture(scope="module")
def docs(helm) -> list[dict[str, Any]]:
    return render(helm, *WITH_AUDIT)


def test_chart_runbooks_are_the_docs_runbooks():
    docs_pages = _pages(DOCS_RUNBOOKS)
    chart_pages = _pages(CHART_RUNBOOKS)
    assert "README.md" in docs_pages
    assert set(chart_pages) == set(docs_pages), (
        f"helm/kafka-tiered-processor/runbooks/ has other pages than docs/runbooks/ "
        f"(extra: {sorted(set(chart_pages) - set(docs_pages))}, "
        f"missing: {sorted(set(docs_pages) - set(chart_pages))}): resync with "
        f"`rm helm/kafka-tiered-processor/runbooks/*.md && {RESYNC}`"
    )
    drifted = sorted(name for name in docs_pages if chart_pages[name] != docs_pages[name])
    assert not drifted, f"the chart's copies of {drifted} differ from docs/runbooks/: resync with `{RESYNC}`"


def test_configmap_holds_every_alerts_runbook(docs):
    config = named(docs, "ConfigMap", "-runbooks")
    assert config["metadata"]["name"] == CONFIGMAP
    data: dict[str, str] = config["data"]
    expected = {f"{alert}.md" for alert in _alerts(docs)} | {"README.md"}
    assert set(data) == expected
    for key, text in data.items():
        assert text.encode() == (DOCS_RUNBOOKS / key).read_bytes(), (
            f"{key} in the ConfigMap is not docs/runbooks/{key}: resync with `{RESYNC}`"
        )
    size = len(yaml.safe_dump(config).encode())
    assert size < CONFIGMAP_BUDGET, (
        f"the runbooks ConfigMap is {size} bytes: keep it well under the 1 MiB ConfigMap limit"
    )


def test_configmap_only_with_the_prometheus_rule(helm, default_docs):
    assert not [d for d in by_kind(default_docs, "ConfigMap") if d["metadata"]["name"] == CONFIGMAP]
    assert by_kind(render(helm, *BASE, *PROMETHEUS_RULE), "PrometheusRule")
    assert named(render(helm, *BASE, *PROMETHEUS_RULE), "ConfigMap", "-runbooks")


def test_by_default_each_alert_says_how_to_read_its_runbook_from_the_cluster(docs):
    for alert, rule in _alerts(docs).items():
        annotations = rule["annotations"]
        assert "runbook_url" not in annotations, f"{alert}: no URL while runbookBaseUrl is empty"
        command = annotations["runbook"]
        assert shlex.split(command) == [
            "kubectl", "-n", NS, "get", "configmap", CONFIGMAP, "-o", f"jsonpath={{.data.{alert}\\.md}}",
        ], command  # fmt: skip


def test_the_runbook_command_prints_the_page(docs, kubectl, tmp_path):
    """The annotation's jsonpath, as the shell passes it, against the rendered ConfigMap: the escaped
    dot selects the key (unescaped, `.md` would be read as a nested field and print nothing)."""
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(named(docs, "ConfigMap", "-runbooks")))
    for alert, rule in _alerts(docs).items():
        args = shlex.split(rule["annotations"]["runbook"])
        output = args[args.index("-o") + 1]
        proc = subprocess.run(
            [str(kubectl), "label", "--local", "-f", str(tmp_path / "cm.yaml"), "-o", output, "probe=1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        page = (DOCS_RUNBOOKS / f"{alert}.md").read_text()
        assert proc.stdout.rstrip("\n") == page.rstrip("\n"), alert


@pytest.mark.parametrize("base", ["https://wiki.example.com/runbooks", "https://wiki.example.com/runbooks/"])
def test_runbook_base_url_links_each_alert(helm, base):
    docs = render(helm, *WITH_AUDIT, "--set", f"monitoring.prometheusRule.runbookBaseUrl={base}")
    for alert, rule in _alerts(docs).items():
        assert rule["annotations"]["runbook_url"] == f"https://wiki.example.com/runbooks/{alert}.md"
        assert "runbook" not in rule["annotations"], alert
    assert named(docs, "ConfigMap", "-runbooks")  # still shipped: readable offline


def test_schema_rejects_a_runbook_base_url_that_is_no_url(helm):
    error = render_error(helm, *WITH_AUDIT, "--set", "monitoring.prometheusRule.runbookBaseUrl=wiki/runbooks")
    assert "runbookBaseUrl" in error


def test_no_dead_default_link():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["monitoring"]["prometheusRule"]["runbookBaseUrl"] == ""
    assert "github.com/example" not in (CHART / "templates" / "prometheusrule.yaml").read_text()


def test_notes_say_where_the_runbooks_are(helm, tmp_path):
    from tests.deploy.test_helm_monitoring import _notes

    notes = _notes(helm, tmp_path / "a", *WITH_AUDIT)
    assert f"runbooks: kubectl -n {NS} get configmap {CONFIGMAP} -o jsonpath='{{.data.README\\.md}}'" in notes
    assert "runbook_url" not in notes
    base = "https://wiki.example.com/runbooks"
    notes = _notes(
        helm, tmp_path / "b", *WITH_AUDIT, "--set", f"monitoring.prometheusRule.runbookBaseUrl={base}"
    )
    assert f"alerts link {base}/<AlertName>.md (runbook_url)" in notes

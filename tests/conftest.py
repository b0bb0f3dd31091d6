"""Shared fixtures. Servers are started by the fixtures themselves, once per session, on free
loopback ports, and stopped by PID.

The session stack's broker is Apache Kafka (the broker our users run) wherever Java and Maven are on
PATH, and must be in CI (``CI=true``): a CI run without them fails instead of testing on Tansu.
``PROCESSOR_DEV_BROKER=tansu`` runs the suite on Tansu instead, on a machine without Java (tests of
what only a real broker does are skipped there, each saying so).

``PROCESSOR_TEST_STACK=testcontainers`` switches the stack to Apache Kafka and MinIO containers
where a Docker engine runs; without Docker that choice skips the integration tests, never fails.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from processor.devstack import emulators, stack
from tests.support.archive import OffloadedArchive, offload_archive
from tests.support.fault_proxy import FaultProxy

# Hypothesis's per-example deadline and its slow-generation check measure the machine's load, not the
# code: the suite runs beside its own brokers, S3 servers and JVMs on two cores (examples of 200 ms
# tests took 270-510 ms on a loaded machine, and generation slowed below the check's bound). A test
# that sets its own settings keeps them; every other one runs without the two.
hypothesis_settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("suite")

# Every JVM the tests start (the Spark session, and `processor audit` and the bench harness run as
# children) compiles with C1 only and collects with the serial collector: the tests' Spark jobs are
# small and short, and C2 compiling took a fifth of the Spark tests' CPU on two cores (tests/spark:
# 313 -> 252 CPU-seconds, 409 -> 382 s, same results). JAVA_TOOL_OPTIONS reaches child JVMs too.
JVM_TEST_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if JVM_TEST_OPTIONS not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {JVM_TEST_OPTIONS}".strip()

# The marks each folder's tests carry, so `-m integration` and `-m spark` select by what a test needs
# (the Makefile's targets select by mark, not by folder).
FOLDER_MARKS = {"integration": ("integration",), "spark": ("spark", "integration")}
# `make test` runs the suite on three pytest-xdist workers, each with a stack of its own. A test module
# is one unit of work (its module fixtures start once), except where modules share a session fixture
# that costs a worker process or a JVM: those are one unit, so the fixture starts once.
SHARED_UNITS = {
    "tests/spark/": "spark",  # one SparkSession
    "tests/integration/test_cli_ops.py": "archive",  # the offloaded archive (tests/support/archive.py)
    "tests/integration/test_remote_reads.py": "archive",
    "tests/integration/test_metadata_snapshots.py": "archive",
    "tests/integration/test_snapshot_readers.py": "archive",
    # helm, promtool and Debian's package lists are fetched into .cache/ on first use: workers
    # fetching at once failed (and the tests skipped) on a fresh clone
    "tests/deploy/": "deploy",
}
# Units are handed out in this order of folders (the slowest first, the many quick unit tests fill in
# at the end), so no long unit starts last.
FOLDER_ORDER = ("spark", "integration", "contract", "deploy", "unit")
# The session stack's processes need no graceful stop: the broker's log and the bucket are thrown
# away, while SeaweedFS's filer waits 15 s for its gRPC streams on SIGTERM.
STACK_STOP_GRACE_S = 2.0
_ARCHIVES: list[OffloadedArchive] = []  # the session's archive, once made (its worker stops early)


def unit_of_work(nodeid: str) -> str:
    """The unit a test is scheduled in: its module, or the shared unit its module belongs to."""
    module = nodeid.split("::", 1)[0]
    for prefix, unit in SHARED_UNITS.items():
        if module.startswith(prefix):
            return unit
    return module


# The cloud emulators (processor/devstack/emulators.py) take minutes to install on a fresh machine
# (fake-gcs-server is built from its Go module). The run's first process starts that in the
# background at once, so it overlaps the tests before the cloud ones; those wait on the installer's
# lock if it is not done, or install themselves if it failed (its log's tail is reported at the end).
_EMULATOR_PREFETCH: list[tuple[subprocess.Popen[bytes], Path]] = []
EMULATOR_PREFETCH_WAIT_S = 60.0


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or emulators.installed():
        return  # an xdist worker (the controller prefetches), or nothing to install
    log_path = Path(tempfile.mkdtemp(prefix="emulator-prefetch-")) / "install.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor.devstack.emulators"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    _EMULATOR_PREFETCH.append((proc, log_path))


def pytest_sessionfinish(session: pytest.Session) -> None:
    for proc, log_path in _EMULATOR_PREFETCH:
        try:
            code = proc.wait(timeout=EMULATOR_PREFETCH_WAIT_S)
        except subprocess.TimeoutExpired:  # a short run: the next run starts the install again
            proc.kill()
            proc.wait()
            continue
        if code != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            said = f"installing the cloud emulators failed (exit {code}); its log ({log_path}) ends:\n{tail}"
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(said, red=True)
            else:
                print(said, file=sys.stderr)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load-by-scope scheduling with :func:`unit_of_work` as the scope. (Its own
    ``--dist loadgroup`` renames node ids, which pytest 9.2 no longer allows; this needs no marks.)"""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return UnitScheduling(config, log)


SLOW_TIMEOUT_S = 1800


@pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).parent

    def folder(item: pytest.Item) -> str:
        try:
            return item.path.relative_to(tests_root).parts[0]
        except ValueError:
            return ""

    for item in items:
        for mark in FOLDER_MARKS.get(folder(item), ()):
            if mark not in item.keywords:
                item.add_marker(mark)
        # the 120 s default is for make test; the slow soaks and full-scale runs take minutes
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))

    def folder_rank(item: pytest.Item) -> int:
        name = folder(item)
        return FOLDER_ORDER.index(name) if name in FOLDER_ORDER else len(FOLDER_ORDER)

    # slowest folder first; a unit's modules next to each other (also without xdist); the order
    # within a module stays (the sort is stable)
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(unit_of_work(item.nodeid), index)
    items.sort(key=lambda item: (folder_rank(item), first_seen[unit_of_work(item.nodeid)]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of the archive's unit, the archive's worker stops (it would idle on for
    the rest of the session); the archive itself stays readable."""
    unit = unit_of_work(item.nodeid)
    if unit == SHARED_UNITS["tests/integration/test_cli_ops.py"] and (
        nextitem is None or unit_of_work(nextitem.nodeid) != unit
    ):
        for archive in _ARCHIVES:
            archive.worker.stop()


def _testcontainers_stack(tmp: Path) -> Iterator[stack.StackInfo]:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as exc:  # no engine here: skip, never fail
        pytest.skip(f"PROCESSOR_TEST_STACK=testcontainers but no Docker engine: {exc}")
    from testcontainers.kafka import KafkaContainer
    from testcontainers.minio import MinioContainer

    with KafkaContainer() as kafka, MinioContainer() as minio:
        cfg = minio.get_config()
        os.environ["AWS_ACCESS_KEY_ID"] = cfg["access_key"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = cfg["secret_key"]
        client = minio.get_client()
        client.make_bucket(stack.DEFAULT_BUCKET)
        yield stack.StackInfo(
            str(tmp),
            kafka.get_bootstrap_server(),
            f"http://{cfg['endpoint']}",
            stack.DEFAULT_BUCKET,
            broker=stack.KAFKA,
        )


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackInfo]:
    root = tmp_path_factory.mktemp("stack")
    if os.environ.get("PROCESSOR_TEST_STACK") == "testcontainers":
        yield from _testcontainers_stack(root)
        return
    broker = stack.default_broker()
    if os.environ.get("CI") == "true" and broker != stack.KAFKA:
        pytest.fail(
            f"CI runs the integration tests on Apache Kafka, but {stack.BROKER_ENV}={broker} or Java 17 and "
            "Maven are not on PATH"
        )
    info = stack.start(root, broker=broker)
    saved = {k: os.environ.get(k) for k in info.env()}
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    try:
        yield info
    finally:
        stack.stop(root, grace_s=STACK_STOP_GRACE_S)
        for k, v in saved.items():
            if k.startswith("AWS_"):
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="session")
def secured_stack(
    local_stack: stack.StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stack.StackInfo]:
    """The Kafka side secured (processor dev up --secure), beside the session stack's S3: one Apache
    Kafka broker with a SASL_SSL listener (``bootstrap_servers``, ``env()``) and a mutual-TLS one
    (``secured.mtls_env()``), ACLs on."""
    if os.environ.get("PROCESSOR_TEST_STACK") == "testcontainers":
        pytest.skip("the secured stack runs on the local stack only")
    if local_stack.broker != stack.KAFKA:
        pytest.skip("the secured stack needs Apache Kafka (Java 17 and Maven): Tansu has no TLS or SASL")
    root = tmp_path_factory.mktemp("secured-stack")
    info = stack.start(
        root, bucket=local_stack.bucket, secure=True, s3_endpoint_url=local_stack.s3_endpoint_url
    )
    try:
        yield info
    finally:
        stack.stop(root)


@pytest.fixture
def fault_proxy(local_stack: stack.StackInfo) -> Iterator[FaultProxy]:
    """A fault-injecting S3 proxy in front of the session stack's S3, started per test."""
    with FaultProxy(local_stack.s3_endpoint_url) as proxy:
        yield proxy


@pytest.fixture
def proxied_stack(local_stack: stack.StackInfo, fault_proxy: FaultProxy) -> stack.StackInfo:
    """The session stack with its S3 endpoint replaced by this test's fault proxy."""
    return dataclasses.replace(local_stack, s3_endpoint_url=fault_proxy.endpoint_url)


@pytest.fixture(scope="session")
def offloaded_archive(
    local_stack: stack.StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OffloadedArchive]:
    """The session's one offloaded archive (tests/support/archive.py), its worker still running."""
    archive = offload_archive(local_stack, tmp_path_factory.mktemp("archive"))
    _ARCHIVES.append(archive)
    try:
        yield archive
    finally:
        archive.worker.stop()


@pytest.fixture
def unreachable_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run in this process give up on a broker that never answers after 2 s, not 10: for
    tests whose broker is an address nothing listens on (the wait itself is not what they test)."""
    from processor.kafka import admin

    monkeypatch.setattr(admin, "BROKER_CHECK_TIMEOUT_S", 2.0)

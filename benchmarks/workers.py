"""Many partitions per worker: one worker leading ``partitions`` partitions of a quiet topic (a few
records in a few partitions, none in the rest), then a second worker joining its group, then the
first killed with SIGKILL.

Figures (each a real ``processor worker`` child on the stack, its product defaults except a 5 s
segment roll by time, so that the record produced at the kill is offloaded within the run):

- the time from the worker's start to every partition claimed (its LEAD claims read back from the
  metadata topic by a consumer of this process), and to its first claim (Faust's start and the
  group join, before any partition is claimed);
- its RSS once settled (``VmRSS``) against a worker of ``BASELINE_PARTITIONS`` partitions of the same
  kind: the difference over the partitions is the memory of an idle partition;
- the metadata records it writes while idle (the metadata topic's high watermarks before and after
  ``idle_s`` seconds), extrapolated to an hour, and its CPU while idle;
- the time from a second worker's start to the group rebalanced: every partition's latest claim
  held by one of the two, the second holding its share, no claim for ``SETTLED_S``;
- the time from SIGKILL of the first worker to every partition it held claimed by the second, and
  to a record produced to one of them at the kill being offloaded (the second worker's
  ``processor_remote_end_offset`` of that partition reaching it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks import cpu
from benchmarks.report import Figure, Report
from processor.devstack import stack
from processor.errors import FormatError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import decode_value
from processor.metadata.model import ClaimKind, PartitionClaim

MiB = 1024 * 1024
BASELINE_PARTITIONS = 10
WITH_DATA = 5  # partitions that get a few records; the rest stay empty
SETTLE_S = 20.0  # after every partition is claimed, before RSS is read
SETTLED_S = 10.0  # no claim for this long: the rebalance is over
CORES = os.cpu_count() or 1
SHARED = f"{CORES} cores shared with other jobs"
EXTRA_ENV: dict[str, str] = {}  # settings every worker of this section gets, over its own


@dataclass
class Claims:
    """The latest LEAD claim of every source partition, tailed from the metadata topic."""

    owner: dict[TopicPartition, str] = field(default_factory=dict)
    last_at: float = 0.0  # monotonic time of the latest claim seen
    records: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, writer: str, topic: str) -> int:
        with self.lock:
            return sum(1 for tp, w in self.owner.items() if w == writer and tp.topic == topic)

    def held_by(self, writer: str) -> list[TopicPartition]:
        with self.lock:
            return sorted(tp for tp, w in self.owner.items() if w == writer)


class ClaimWatch:
    """A consumer of this process reading a metadata topic from its start: the claims it holds."""

    def __init__(self, info: stack.StackInfo, topic: str) -> None:
        self.info = info
        self.topic = topic
        self.claims = Claims()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-watch", daemon=True)
        self._thread.start()

    def _partitions(self, consumer: Consumer) -> int:
        while not self._stop.is_set():
            topics = consumer.list_topics(self.topic, timeout=5).topics
            meta = topics.get(self.topic)
            if meta is not None and meta.error is None and meta.partitions:
                return len(meta.partitions)
            time.sleep(0.5)
        return 0

    def _run(self) -> None:
        consumer = new_consumer(self.info.bootstrap_servers, f"bench-claims-{uuid.uuid4().hex[:6]}")
        try:
            count = self._partitions(consumer)
            consumer.assign([KafkaTP(self.topic, p, OFFSET_BEGINNING) for p in range(count)])
            while not self._stop.is_set():
                for msg in consumer.consume(1000, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            print(f"[workers] metadata topic: {err}", flush=True)
                        continue
                    try:
                        record = decode_value(msg.value())
                    except FormatError:
                        continue
                    with self.claims.lock:
                        self.claims.records += 1
                        if isinstance(record, PartitionClaim) and record.kind is ClaimKind.LEAD:
                            self.claims.owner[record.topic_partition] = record.writer_id
                            self.claims.last_at = time.monotonic()
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def metadata_records(info: stack.StackInfo, topic: str) -> int:
    """Records on ``topic`` (the sum of its partitions' high watermarks)."""
    consumer = new_consumer(info.bootstrap_servers, "bench-watermarks")
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        consumer.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


_END = re.compile(r'^processor_remote_end_offset\{partition="(\d+)",topic="([^"]+)"\} ([0-9.e+-]+)$', re.M)


def remote_end(port: int, tp: TopicPartition) -> float | None:
    """The worker's ``processor_remote_end_offset`` of ``tp`` (None: not exported, or no answer)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for partition, topic, value in _END.findall(text):
        if topic == tp.topic and int(partition) == tp.partition:
            return float(value)
    return None


_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
_ASSIGNED = re.compile(r"assignment \(generation (\d+)\): (\d+) kept, (\d+) new, (\d+) revoked")
_JOINED = "Joined group"
_EXPELLED = "local member_id was not recognized"  # the group dropped it: no heartbeat in its session


def _wall(line: str) -> float | None:
    m = _LINE.match(line)
    if m is None:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000


@dataclass(frozen=True)
class GroupLog:
    """What a worker's log says of its group: its assignments (generation, wall time they were done,
    partitions assigned), the wall time of its latest join, how often the group dropped it."""

    assignments: list[tuple[int, float, int]]
    last_join: float
    expelled: int


class Worker:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = int(env["PROCESSOR_WEB_PORT"])
        self.log_path = log_path
        self.started = time.monotonic()
        self.started_wall = time.time()
        with log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "processor", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}; see {self.log_path}")

    def group(self) -> GroupLog:
        assignments: list[tuple[int, float, int]] = []
        last_join, expelled = 0.0, 0
        for line in self.log_path.read_text(errors="replace").splitlines():
            if (m := _ASSIGNED.search(line)) is not None:
                assigned = int(m.group(2)) + int(m.group(3))
                assignments.append((int(m.group(1)), _wall(line) or 0.0, assigned))
            elif _JOINED in line:
                last_join = _wall(line) or 0.0
            elif _EXPELLED in line:
                expelled += 1
        return GroupLog(assignments, last_join, expelled)

    def led(self, topic: str) -> int:
        """Partitions of ``topic`` the worker leads now (its ``processor_remote_end_offset`` series,
        set when the engine starts leading one); -1 without an answer."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        except OSError:
            return -1
        return sum(1 for _p, t, _v in _END.findall(text) if t == topic)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for(what: str, done: Callable[[], bool], timeout_s: float, *workers: Worker) -> float:
    """Monotonic time ``done()`` first held (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        for w in workers:
            w.alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic()


def produce(info: stack.StackInfo, topic: str, partitions: list[int], records: int) -> dict[int, int]:
    """``records`` small records into each of ``partitions``; returns the last offset of each."""
    producer = Producer({"bootstrap.servers": info.bootstrap_servers, "acks": "all", "linger.ms": 5})
    last: dict[int, int] = {}

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is None:
            p, o = msg.partition(), msg.offset()  # type: ignore[attr-defined]
            last[p] = max(last.get(p, -1), o)

    for p in partitions:
        for i in range(records):
            producer.produce(topic, b'{"event":%d}' % i, b"k%d" % i, partition=p, on_delivery=delivered)
    if producer.flush(60):
        raise RuntimeError("the producer did not deliver everything")
    return last


@dataclass
class Settled:
    worker: Worker
    claimed_s: float  # start -> every partition claimed
    led_s: float  # start -> every partition led by its engine
    first_claim_s: float  # start -> its first claim
    rss: int


def start_and_settle(
    info: stack.StackInfo,
    workdir: Path,
    env: dict[str, str],
    topic: str,
    partitions: int,
    watch: ClaimWatch,
    writer: str,
) -> Settled:
    worker = Worker(env, workdir / f"worker-{writer}.log")
    try:
        first = wait_for(
            f"{writer}: a first claim", lambda: watch.claims.count(writer, topic) > 0, 600, worker
        )
        claimed = wait_for(
            f"{writer}: all {partitions} partitions claimed",
            lambda: watch.claims.count(writer, topic) >= partitions,
            1800,
            worker,
        )
        led = wait_for(
            f"{writer}: all {partitions} partitions led",
            lambda: worker.led(topic) >= partitions,
            1800,
            worker,
        )
        time.sleep(SETTLE_S)
        worker.alive()
        return Settled(
            worker,
            claimed - worker.started,
            led - worker.started,
            first - worker.started,
            rss_bytes(worker.proc.pid),
        )
    except BaseException:
        worker.stop()
        raise


def settled_group(
    workers: list[Worker], generation_after: int, claims: Claims, topic: str, writers: list[str]
) -> float | None:
    """Wall time the group's latest rebalance ended (every worker's latest assignment done, of one
    generation past ``generation_after``, no join since, nothing for ``SETTLED_S``, and every worker
    holding the claims of as many partitions as it is assigned: a partition another worker claimed
    meanwhile is claimed again only once that claim is quiet); None while it has not."""
    logs = [w.group() for w in workers]
    if any(
        g.assignments and claims.count(w, topic) != g.assignments[-1][2]
        for g, w in zip(logs, writers, strict=True)
    ):
        return None
    if not all(g.assignments for g in logs):
        return None
    generations = {g.assignments[-1][0] for g in logs}
    done = max(g.assignments[-1][1] for g in logs)
    if len(generations) != 1 or generations.pop() <= generation_after:
        return None
    if max(g.last_join for g in logs) > done or time.time() - done < SETTLED_S:
        return None
    return done


def bench_many_partitions(
    report: Report,
    info: stack.StackInfo,
    workdir: Path,
    partitions: int = 2000,
    idle_s: float = 180.0,
    second_worker: bool = True,
) -> None:
    """See the module docstring. ``idle_s``: how long the idle metadata records are counted;
    ``second_worker``: also the rebalance and the failover (else one worker only)."""
    tag = uuid.uuid4().hex[:8]
    big, few = f"bench-many-{partitions}-{tag}", f"bench-few-{tag}"
    admin = new_admin(info.bootstrap_servers, "bench")
    t0 = time.monotonic()
    ensure_topic(admin, big, partitions, 1, {}, timeout_s=300)
    create_s = time.monotonic() - t0
    ensure_topic(admin, few, BASELINE_PARTITIONS, 1, {})
    produce(info, big, list(range(WITH_DATA)), 5)
    produce(info, few, list(range(WITH_DATA)), 5)
    print(f"[workers] topic {big}: {partitions} partitions created in {create_s:.1f} s", flush=True)
    label = f"{partitions} partitions"

    def env(name: str, topic: str, writer: str) -> dict[str, str]:
        return info.worker_env(
            workdir / f"data-{writer}",
            topic,
            PROCESSOR_APP_ID=f"bench-{name}-{tag}",
            PROCESSOR_WORKER_ID=writer,
            PROCESSOR_METADATA_TOPIC=f"__bench_{name}_meta_{tag}",
            PROCESSOR_S3_PREFIX=f"bench-{name}-{tag}",
            PROCESSOR_SEGMENT_MS="5000",
            PROCESSOR_LOG_LEVEL="info",
            **EXTRA_ENV,
        )

    # the baseline: a worker of BASELINE_PARTITIONS partitions, alone
    base_env = env("few", few, f"few-{tag}")
    base_watch = ClaimWatch(info, base_env["PROCESSOR_METADATA_TOPIC"])
    try:
        print(f"[workers] a worker of {BASELINE_PARTITIONS} partitions ...", flush=True)
        base = start_and_settle(
            info, workdir, base_env, few, BASELINE_PARTITIONS, base_watch, base_env["PROCESSOR_WORKER_ID"]
        )
        base.worker.stop()
    finally:
        base_watch.stop()

    a_env = env("many", big, f"a-{tag}")
    b_env = {**env("many", big, f"b-{tag}")}
    a_id, b_id = a_env["PROCESSOR_WORKER_ID"], b_env["PROCESSOR_WORKER_ID"]
    meta_topic = a_env["PROCESSOR_METADATA_TOPIC"]
    watch = ClaimWatch(info, meta_topic)
    workers: list[Worker] = []
    try:
        print(f"[workers] a worker of {partitions} partitions ...", flush=True)
        a = start_and_settle(info, workdir, a_env, big, partitions, watch, a_id)
        workers.append(a.worker)
        per_partition = (a.rss - base.rss) / (partitions - BASELINE_PARTITIONS)
        report.add(
            Figure(
                "workers",
                f"{label}: start to all led",
                a.led_s,
                "s",
                f"{BASELINE_PARTITIONS} partitions",
                base.led_s,
                a.led_s / base.led_s,
                note=f"all claimed after {a.claimed_s:.1f} s, the first after {a.first_claim_s:.1f} s "
                f"({BASELINE_PARTITIONS} partitions: {base.first_claim_s:.1f} s; before it: the process's "
                f"start, Faust's and the group join); the group dropped it for a missed session "
                f"{a.worker.group().expelled} times; topic created in {create_s:.1f} s; {SHARED}",
            )
        )
        report.add(
            Figure(
                "workers",
                f"{label}: RSS settled",
                a.rss / MiB,
                "MiB",
                f"{BASELINE_PARTITIONS} partitions",
                base.rss / MiB,
                a.rss / base.rss,
                note=f"{per_partition / 1024:.1f} KiB per idle partition (the difference over "
                f"{partitions - BASELINE_PARTITIONS}); {threads(a.worker.proc.pid)} threads; "
                f"VmRSS {SETTLE_S:.0f} s after every claim",
            )
        )

        # idle: the metadata records and the CPU of a worker whose partitions get nothing
        before, cpu_before = metadata_records(info, meta_topic), cpu.cpu_seconds(a.worker.proc.pid)
        t_idle = time.monotonic()
        print(f"[workers] idle for {idle_s:.0f} s ...", flush=True)
        while time.monotonic() - t_idle < idle_s:
            a.worker.alive()
            time.sleep(1)
        spent = time.monotonic() - t_idle
        after, cpu_after = metadata_records(info, meta_topic), cpu.cpu_seconds(a.worker.proc.pid)
        per_hour = (after - before) / spent * 3600
        report.add(
            Figure(
                "workers",
                f"{label}: metadata records an idle hour",
                per_hour,
                "rec/h",
                note=f"{after - before} records in {spent:.0f} s idle, extrapolated to an hour "
                f"({per_hour / partitions:.2f} a partition); the worker's CPU meanwhile "
                f"{(cpu_after - cpu_before) / spent:.0%} of a core; {SHARED}",
            )
        )
        report.add(
            Figure(
                "workers",
                f"{label}: idle CPU",
                (cpu_after - cpu_before) / spent * 100,
                "% core",
                note=f"user+system of the worker over {spent:.0f} s idle; {SHARED}",
            )
        )
        if not second_worker:
            return

        # a second worker joins the group
        print("[workers] a second worker joins ...", flush=True)
        before_join = a.worker.group()
        generation = before_join.assignments[-1][0]
        b = Worker(b_env, workdir / "worker-b.log")
        workers.append(b)
        ended: list[float] = []

        def rebalanced() -> bool:
            done = settled_group([a.worker, b], generation, watch.claims, big, [a_id, b_id])
            if done is None or watch.claims.count(a_id, big) + watch.claims.count(b_id, big) < partitions:
                return False
            ended.append(done)
            return True

        wait_for("the rebalance", rebalanced, 900, a.worker, b)
        split = (watch.claims.count(a_id, big), watch.claims.count(b_id, big))
        ga, gb = a.worker.group(), b.group()
        b_first = next(t for g, t, _ in gb.assignments if g > generation)
        report.add(
            Figure(
                "workers",
                f"{label}: second worker joins, rebalanced",
                ended[0] - b.started_wall,
                "s",
                note=f"second worker's start to the group's last assignment done ({split[0]} / {split[1]} "
                f"partitions; its first assignment done after {b_first - b.started_wall:.1f} s, "
                f"{gb.assignments[-1][0] - generation} generations; the group dropped a worker for a "
                f"missed session {ga.expelled - before_join.expelled + gb.expelled} times); {SHARED}",
            )
        )

        # the first worker dies: its partitions go to the second
        held = [tp for tp in watch.claims.held_by(a_id) if tp.topic == big]
        quiet = [tp for tp in held if tp.partition >= WITH_DATA]
        probe = quiet[len(quiet) // 2]
        generation = gb.assignments[-1][0]
        os.kill(a.worker.proc.pid, signal.SIGKILL)
        killed, killed_wall = time.monotonic(), time.time()
        a.worker.proc.wait()
        offset = produce(info, big, [probe.partition], 1)[probe.partition]
        print(f"[workers] killed the first worker; probe {probe} offset {offset} ...", flush=True)
        taken = wait_for(
            "the dead worker's partitions claimed again",
            lambda: watch.claims.count(b_id, big) >= partitions,
            900,
            b,
        )
        led = wait_for("the dead worker's partitions led again", lambda: b.led(big) >= partitions, 900, b)

        def offloaded() -> bool:
            end = remote_end(b.port, probe)
            return end is not None and end >= offset

        done = wait_for("the probe record offloaded", offloaded, 900, b)
        gb = b.group()
        joined = [t for g, t, _ in gb.assignments if g > generation]
        session_s = int(b_env.get("PROCESSOR_SESSION_TIMEOUT_MS", "10000")) / 1000
        report.add(
            Figure(
                "workers",
                f"{label}: SIGKILL to all led again",
                led - killed,
                "s",
                note=f"{len(held)} partitions of the dead worker claimed by the other after "
                f"{taken - killed:.1f} s, led after {led - killed:.1f} s (its assignment done after "
                f"{(joined[0] if joined else 0) - killed_wall:.1f} s); session timeout {session_s:.0f} s "
                f"(the product's default 10 s), which bounds it from below; {SHARED}",
            )
        )
        report.add(
            Figure(
                "workers",
                f"{label}: SIGKILL to a new record offloaded",
                done - killed,
                "s",
                note=f"a record produced to {probe} at the kill, offloaded by the other worker "
                f"(its roll by time: 5 s); {SHARED}",
            )
        )
    finally:
        for w in workers:
            w.stop()
        watch.stop()


def main() -> None:
    """``python -m benchmarks.workers STACK_DIR [PARTITIONS] [IDLE_S] [one]``: this section alone on
    the stack ``processor dev up --dir STACK_DIR`` runs (``one``: without the second worker). Extra
    worker settings from the environment's ``BENCH_WORKER_*`` (``BENCH_WORKER_SESSION_TIMEOUT_MS``
    sets ``PROCESSOR_SESSION_TIMEOUT_MS``)."""
    import tempfile  # only for this entry point

    info = stack.load(sys.argv[1])
    if info is None:
        raise SystemExit(f"no stack in {sys.argv[1]}")
    partitions = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    idle_s = float(sys.argv[3]) if len(sys.argv) > 3 else 180.0
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    report = Report()
    second = not (len(sys.argv) > 4 and sys.argv[4] == "one")
    for name, value in os.environ.items():
        if name.startswith("BENCH_WORKER_"):
            EXTRA_ENV["PROCESSOR_" + name.removeprefix("BENCH_WORKER_")] = value
    workdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    bench_many_partitions(report, info, workdir, partitions, idle_s, second)
    print(report.table())


if __name__ == "__main__":
    main()

"""``processor offload --topic T [--partition P]``: roll and copy the open segments now (PIP-17's
admin-triggered offload) and return when the remote end reaches the source's last offset.

Only a partition's leader can roll it, so the command asks the workers (``POST /offload`` on each
worker's web port, ``--worker-url`` or PROCESSOR_WORKER_URLS, default
``http://127.0.0.1:PROCESSOR_WEB_PORT``); each answers for the partitions it leads. Exit 0 when every
asked partition is offloaded, 1 when one is not (time out, or no worker leads it), 3 when a worker
cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from processor.config import load_settings
from processor.errors import ConfigError, ServiceUnavailableError
from processor.kafka.admin import check_broker, partition_counts
from processor.segment.object_keys import validate_topic


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("offload", help="roll and copy a topic's open segments now, wait until copied")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--worker-url",
        action="append",
        help="a worker's base URL (repeatable; default PROCESSOR_WORKER_URLS or the local worker)",
    )
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.set_defaults(func=cmd_offload)


def _ask(
    url: str, topic: str, partition: int | None, timeout_s: float, token: str | None = None
) -> dict[str, Any]:
    query = {"topic": topic, "timeout_s": str(timeout_s)}
    if partition is not None:
        query["partition"] = str(partition)
    headers = {"Authorization": f"Bearer {token}"} if token else {}  # PROCESSOR_WEB_TOKEN
    request = urllib.request.Request(
        f"{url}/offload?{urllib.parse.urlencode(query)}", method="POST", data=b"", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s + 30) as resp:
            body: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (400, 401):
            raise ConfigError(json.loads(exc.read()).get("error", str(exc))) from None
        raise ServiceUnavailableError(f"worker at {url} answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceUnavailableError(f"worker at {url} is unreachable: {exc}") from None
    return dict(body.get("partitions", {}))


# A worker that is starting (its web port not open yet, or the partitions not assigned to it yet) is
# asked again, every RETRY_S or so: `processor worker &` then `processor offload` is how a first run
# goes. An unreachable worker gets WORKER_START_S of that (a wrong URL is reported soon); a worker that
# answers but leads no partition yet, the whole --timeout-s.
RETRY_S = 0.5
WORKER_START_S = 20.0


def _answers_of_leaders(
    urls: list[str],
    topic: str,
    partition: int | None,
    wanted: list[int],
    timeout_s: float,
    settings: Any,
) -> dict[int, dict[str, Any]]:
    """Each wanted partition's answer from the worker that leads it, asking again while a worker is
    unreachable or no worker leads a partition yet, until ``timeout_s`` (then the last answers, or
    the unreachable worker's error)."""
    token = settings.web_token.get_secret_value() if settings.web_token else None
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        answers: dict[int, dict[str, Any]] = {}
        try:
            for url in urls:
                left = max(1.0, deadline - time.monotonic())
                for p, result in _ask(url, topic, partition, left, token).items():
                    answers[int(p)] = result
        except ServiceUnavailableError:
            if time.monotonic() + RETRY_S >= min(deadline, started + WORKER_START_S):
                raise
        else:
            if all(p in answers for p in wanted) or time.monotonic() + RETRY_S >= deadline:
                return answers
        time.sleep(RETRY_S * random.uniform(0.8, 1.2))  # jittered: several commands asking at once


def cmd_offload(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    if (args.partition is not None and args.partition < 0) or args.timeout_s <= 0:
        raise ConfigError("--partition must be >= 0 and --timeout-s positive")
    urls = [u.rstrip("/") for u in args.worker_url or ()] or list(settings.worker_urls)
    urls = urls or [f"http://127.0.0.1:{settings.web_port}"]
    if args.partition is not None:
        wanted = [args.partition]
    else:
        counts = partition_counts(check_broker(settings.kafka), [topic])
        if topic not in counts:
            raise ConfigError(f"topic {topic} does not exist")
        wanted = list(range(counts[topic]))
    answers = _answers_of_leaders(urls, topic, args.partition, wanted, args.timeout_s, settings)
    ok = True
    for p in wanted:
        result = answers.get(p)
        if result is None:
            print(f"{topic}-{p}: no asked worker leads it")
            ok = False
            continue
        state = "offloaded" if result["done"] else "NOT offloaded in time"
        print(f"{topic}-{p}: {state} (remote end {result['remote_end']}, target {result['target']})")
        ok = ok and bool(result["done"])
    return 0 if ok else 1

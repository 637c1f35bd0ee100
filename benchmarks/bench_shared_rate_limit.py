"""One rate limit for many worker processes: a limiter shared through PostgreSQL
(``SharedRateLimit``) against a limiter per process.

The server: a local OpenAI-compatible server (``toolloop.testing.FakeOpenAIServer``, in this
process) that admits requests by a token bucket (``--rate`` a second, a burst of half a
second's worth) and answers the others HTTP 429 with ``retry-after-ms``.

The workers: ``--workers`` processes started at once, each running ``--runs`` / workers
middleware agents at once (the real ``OpenAIChatModel`` over HTTP, one model call a run,
``model_retry=RetryPolicy(tries=6)``), every model call admitted by its process's limiter:

- ``shared``: ``SharedRateLimit(rate, name=..., store=PostgresCheckpointStore(url))``, the
  quota of every worker together, in one row of the database;
- ``per process, whole rate``: ``RateLimit(rate)`` in each process (what a worker that
  knows only the quota does);
- ``per process, its share``: ``RateLimit(rate / workers)`` in each process (a static split:
  the workers' demand must be even, and a worker gone leaves its share unused);
- ``per process, adaptive``: ``RateLimit()`` in each process (each learns its share from
  the refusals).

Each row says: runs that failed, requests made, the share the server answered 429, what the
server admitted as a share of the most it would have (its burst, then ``--rate`` a second
from the first request it got to the last: the processes' start is not counted), and the
database round trips of the shared limiter.

Run it with::

    .venv/bin/python benchmarks/bench_shared_rate_limit.py --postgres postgresql://...
    .venv/bin/python benchmarks/bench_shared_rate_limit.py --postgres URL --workers 8 --rate 100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import anyio

MODES = ("shared", "per process, whole rate", "per process, its share", "per process, adaptive")


class Bucket:
    """The server's token bucket: ``rate`` tokens a second, at most ``burst`` kept."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.reset()

    def reset(self) -> None:
        self.tokens = self.burst
        self.at = time.monotonic()
        self.admitted = 0
        self.refused = 0
        self.first = self.last = 0.0  # the first and the last request, while busy

    def respond(self, request: Any) -> Any:
        from toolloop.testing import FakeErrorReply, FakeReply

        now = time.monotonic()
        if not self.admitted + self.refused:
            self.first = now
        self.last = now
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            self.refused += 1
            wait = (1.0 - self.tokens) / self.rate
            headers = {"retry-after-ms": str(math.ceil(wait * 1000))}
            return FakeErrorReply(429, "Rate limit reached: retry later", headers=headers)
        self.tokens -= 1.0
        self.admitted += 1
        return FakeReply(content="done", first_delay=0.02)


# -- a worker process ----------------------------------------------------------------------------


class Counting:
    """The store, with its round trips counted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.trips = 0

    async def update_rate_limit(self, name: str, change: Any) -> Any:
        self.trips += 1
        return await self.store.update_rate_limit(name, change)


async def worker(
    base_url: str, url: str, name: str, mode: str, rate: float, workers: int, runs: int
) -> dict[str, Any]:
    from toolloop.agents import create_agent
    from toolloop.checkpoints import PostgresCheckpointStore
    from toolloop.models import OpenAIChatModel
    from toolloop.ratelimit import RateLimit, RetryPolicy, SharedRateLimit

    failed = 0
    async with (
        PostgresCheckpointStore(url, schema="bench_limits", max_size=2) as store,
        OpenAIChatModel("bench", base_url=base_url, timeout=120) as model,
    ):
        counting = Counting(store)
        limit: RateLimit
        if mode == "shared":
            limit = SharedRateLimit(rate, name=name, store=counting)
        elif mode == "per process, whole rate":
            limit = RateLimit(rate)
        elif mode == "per process, its share":
            limit = RateLimit(rate / workers)
        else:
            limit = RateLimit()
        agent = create_agent(model, model_rate_limit=limit, model_retry=RetryPolicy(tries=6))

        async def one(n: int) -> None:
            nonlocal failed
            try:
                result = await agent.run(f"question {n}")
                if result.text != "done":
                    failed += 1
            except Exception:
                failed += 1

        async with anyio.create_task_group() as tg:
            for n in range(runs):
                tg.start_soon(one, n)
    return {"failed": failed, "trips": counting.trips}


# -- the benchmark -------------------------------------------------------------------------------


@dataclass
class Row:
    mode: str
    workers: int
    runs: int
    failed: int
    admitted: int
    refused: int
    seconds: float
    rate: float
    burst: float
    trips: int

    @property
    def refused_share(self) -> float:
        requests = self.admitted + self.refused
        return self.refused / requests if requests else 0.0

    @property
    def rate_share(self) -> float:
        return self.admitted / (self.burst + self.rate * self.seconds)


async def phase(mode: str, base_url: str, bucket: Bucket, args: argparse.Namespace) -> Row:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    each = args.runs // args.workers
    said: list[dict[str, Any]] = []

    async def one() -> None:
        argv = [base_url, args.postgres, name, mode, str(args.rate), str(args.workers), str(each)]
        done = await anyio.run_process(
            [sys.executable, __file__, "--worker", *argv], check=False, stderr=None
        )
        said.append(
            json.loads(done.stdout) if done.returncode == 0 else {"failed": each, "trips": 0}
        )

    bucket.reset()
    async with anyio.create_task_group() as tg:
        for _ in range(args.workers):
            tg.start_soon(one)
    seconds = bucket.last - bucket.first  # (not the processes' start)
    return Row(
        mode,
        args.workers,
        each * args.workers,
        sum(s["failed"] for s in said),
        bucket.admitted,
        bucket.refused,
        seconds,
        bucket.rate,
        bucket.burst,
        sum(s["trips"] for s in said),
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| limit | workers | runs | failed runs | requests | answered 429 "
        "| of the allowed rate | seconds | database round trips |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.mode} | {r.workers} | {r.runs:,} | {r.failed:,} | "
            f"{r.admitted + r.refused:,} | {100 * r.refused_share:.1f} % | "
            f"{100 * r.rate_share:.1f} % | {r.seconds:.1f} | {r.trips:,} |"
        )
    return "\n".join(lines)


async def bench(args: argparse.Namespace) -> list[Row]:
    from toolloop.testing import FakeOpenAIServer

    bucket = Bucket(args.rate, max(args.rate / 2, 1.0))
    rows: list[Row] = []
    async with FakeOpenAIServer(responder=bucket.respond) as server:
        base_url = f"http://127.0.0.1:{server.port}/v1"
        for mode in args.only or MODES:
            rows.append(await phase(mode, base_url, bucket, args))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        base_url, url, name, mode, rate, workers, runs = sys.argv[2:9]
        said = anyio.run(worker, base_url, url, name, mode, float(rate), int(workers), int(runs))
        print(json.dumps(said))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--postgres",
        default=os.environ.get("TOOLLOOP_POSTGRES_URL"),
        help="the database the workers share (default: $TOOLLOOP_POSTGRES_URL)",
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=400, help="runs of all the workers")
    parser.add_argument("--rate", type=float, default=50.0, help="requests a second allowed")
    parser.add_argument("--only", action="append", choices=MODES)
    args = parser.parse_args()
    if not args.postgres:
        parser.error("give --postgres URL (or set TOOLLOOP_POSTGRES_URL)")
    print(
        f"{args.workers} worker processes, {args.runs} runs in all, the server allowing "
        f"{args.rate:g} requests/s (a burst of {max(args.rate / 2, 1.0):g})",
        flush=True,
    )
    print(table([]))
    anyio.run(bench, args)


if __name__ == "__main__":
    main()

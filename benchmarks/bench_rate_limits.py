"""Rate limits that adapt: 1,000 runs at once against a server that limits its rate.

The server: a local OpenAI-compatible server (``toolloop.testing.FakeOpenAIServer``, in a
process of its own so that it does not share the runs' CPU) that admits requests by a token
bucket (``--rate`` a second, a burst of ``--burst``) and answers the others HTTP 429 with
how long to wait (``retry-after-ms``, and ``Retry-After`` in whole seconds). The allowed
rate must be one the client can reach, or the client's own CPU is measured and not the
limiter: by default it is 40 % of the rate this machine's client reaches with no server
limit (measured first, with ``--runs`` / 5 runs), so that the limit binds. An admitted
request is answered after ``--latency`` seconds: a tool call, then, once the tool's result
is in the messages, an answer.

The runs: ``--runs`` middleware agents (``create_agent``, the real ``OpenAIChatModel`` over
HTTP) started at once, each asking the model (a tool call), running the tool, asking again
(the answer): two model calls a run. Every run has the same retry policy
(``model_retry=RetryPolicy()``: 4 tries, backoff from 0.5 s with jitter, ``Retry-After``
honoured; the client's own retries off), and one of three limits, measured in the same run
against the same server:

- ``adaptive``: ``model_rate_limit=RateLimit()``, one limiter shared by every run, told
  nothing of the server's rate;
- ``fixed 64``: ``RateLimit(concurrency=64, adaptive=False)``, 64 calls at once;
- ``no limit``: no limiter.

Each row says: runs that failed, requests made, the share the server answered 429, and what
the server admitted as a share of the most it would have admitted (its burst, then
``--rate`` a second for the phase's wall time). Targets for ``adaptive``: no failed run, <= 5 % of
requests answered 429, >= 90 % of the allowed rate.

Run it with::

    .venv/bin/python benchmarks/bench_rate_limits.py                # asyncio
    .venv/bin/python benchmarks/bench_rate_limits.py --backend trio   # or both
    .venv/bin/python benchmarks/bench_rate_limits.py --quick          # 300 runs
    .venv/bin/python benchmarks/bench_rate_limits.py --only adaptive --runs 200
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

CONTROL = "bench-control"
"""The model name of the benchmark's own requests to its server (reset, statistics)."""
MODES = ("adaptive", "fixed 64", "no limit")


# -- the server --------------------------------------------------------------------------------


class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` kept."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = time.monotonic()

    def take(self) -> float | None:
        """``None``: a token was taken; else the seconds until one is there."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


def serve(rate: float, burst: float, latency: float) -> None:
    """Run the rate-limited server until stdin closes; print its port first."""
    from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply, FakeToolCall

    bucket = Bucket(rate, burst)
    stats = {"admitted": 0, "refused": 0}
    call = (FakeToolCall(name="lookup", arguments='{"key": "k"}'),)

    def respond(request: Any) -> FakeReply | FakeErrorReply:
        body = request.body
        messages = body.get("messages") or [{}]
        if body.get("model") == CONTROL:
            if messages[-1].get("content") == "reset":
                bucket.tokens, bucket.at = bucket.burst, time.monotonic()
                stats.update(admitted=0, refused=0)
            return FakeReply(content=json.dumps(stats), usage=False)
        wait = bucket.take()
        if wait is not None:
            stats["refused"] += 1
            headers = {"retry-after-ms": str(math.ceil(wait * 1000)), "retry-after": "1"}
            return FakeErrorReply(429, "Rate limit reached: retry later", headers=headers)
        stats["admitted"] += 1
        if messages[-1].get("role") == "tool":
            return FakeReply(content="done", first_delay=latency)
        return FakeReply(tool_calls=call, first_delay=latency)

    async def main() -> None:
        async with FakeOpenAIServer(responder=respond) as server:
            print(server.port, flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)  # until the parent goes

    anyio.run(main)


# -- the runs ----------------------------------------------------------------------------------


@dataclass
class Row:
    mode: str
    runs: int
    failed: int
    admitted: int
    refused: int
    seconds: float
    rate: float
    burst: float
    limiter: str

    @property
    def requests(self) -> int:
        return self.admitted + self.refused

    @property
    def refused_share(self) -> float:
        return self.refused / self.requests if self.requests else 0.0

    @property
    def rate_share(self) -> float:
        """What the server admitted, of the most it would have: its burst, then its rate
        for the phase's time."""
        return self.admitted / (self.burst + self.rate * self.seconds)


async def control(base_url: str, command: str) -> dict[str, int]:
    from toolloop.models import ChatRequest, OpenAIChatModel, stream_chat

    async with OpenAIChatModel(CONTROL, base_url=base_url, max_retries=0) as model:
        request = ChatRequest(messages=[{"role": "user", "content": command}])
        async with stream_chat(model, request) as deltas:
            text = "".join([d.content async for d in deltas])
    stats: dict[str, int] = json.loads(text)
    return stats


async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up.
    """
    return f"value of {key}"


async def phase(mode: str, base_url: str, runs: int, rate: float, burst: float) -> Row:
    from toolloop.agents import create_agent
    from toolloop.models import OpenAIChatModel
    from toolloop.ratelimit import RateLimit, RetryPolicy

    limit = {
        "adaptive": RateLimit(name="model"),
        "fixed 64": RateLimit(concurrency=64, adaptive=False, name="model"),
        "no limit": None,
    }[mode]
    failed = 0
    await control(base_url, "reset")
    async with OpenAIChatModel("bench", base_url=base_url, timeout=120) as model:
        agent = create_agent(model, [lookup], model_retry=RetryPolicy(), model_rate_limit=limit)

        async def one(n: int) -> None:
            nonlocal failed
            try:
                result = await agent.run(f"look up {n}")
                if result.text != "done" or result.records[0].result != "value of k":
                    raise AssertionError(f"run {n} ended with {result.text!r}")
            except Exception:
                failed += 1

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for n in range(runs):
                tg.start_soon(one, n)
            if TRACE and limit is not None:
                tg.start_soon(trace, limit, started)
        seconds = time.perf_counter() - started
    stats = await control(base_url, "stats")
    said = ""
    if limit is not None:
        state = limit.state()
        rate_now = "-" if state.rate is None else f"{state.rate:.0f}/s"
        said = f"rate {rate_now}, {state.backoffs} back-offs"
    return Row(mode, runs, failed, stats["admitted"], stats["refused"], seconds, rate, burst, said)


TRACE = False


async def trace(limit: Any, started: float) -> None:
    while limit.waiting or limit.in_flight:
        await anyio.sleep(0.25)
        state = limit.state()
        print(
            f"  {time.perf_counter() - started:5.2f}s rate={state.rate} room={state.concurrency} "
            f"in_flight={state.in_flight} waiting={state.waiting} admitted={state.admitted} "
            f"refused={state.refused} backoffs={state.backoffs} fast={limit._fast}",
            file=sys.stderr,
        )


def table(rows: list[Row]) -> str:
    lines = [
        "| limit | runs | failed runs | requests | answered 429 | of the allowed rate "
        "| seconds | limiter at the end |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.mode} | {r.runs:,} | {r.failed:,} | {r.requests:,} | "
            f"{100 * r.refused_share:.1f} % | {100 * r.rate_share:.1f} % | {r.seconds:.1f} | "
            f"{r.limiter} |"
        )
    return "\n".join(lines)


async def calibrate(args: argparse.Namespace) -> float:
    """The requests a second the client makes with no limit anywhere (its CPU's bound)."""
    async with serving(1e9, 1e9, args.latency) as base_url:  # (no limit)
        row = await phase("no limit", base_url, max(args.runs // 5, 50), 1e9, 1e9)
    return row.admitted / row.seconds


@asynccontextmanager
async def serving(rate: float, burst: float, latency: float) -> AsyncIterator[str]:
    """The rate-limited server, in a process of its own: its base URL."""
    server = subprocess.Popen(  # noqa: ASYNC220  (started once, not awaited)
        [
            sys.executable,
            __file__,
            "--serve",
            "--rate",
            str(rate),
            "--burst",
            str(burst),
            "--latency",
            str(latency),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(await anyio.to_thread.run_sync(server.stdout.readline))
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        assert server.stdin is not None
        server.stdin.close()
        await anyio.to_thread.run_sync(server.wait, 30)


async def bench(args: argparse.Namespace) -> list[Row]:
    if args.rate is None:
        capacity = await calibrate(args)
        args.rate = float(max(10, round(0.4 * capacity / 10) * 10))
        print(
            f"the client alone makes {capacity:.0f} requests/s here: the server allows "
            f"{args.rate:g}/s",
            flush=True,
        )
    if args.burst is None:
        args.burst = max(args.rate / 2, 1.0)
    async with serving(args.rate, args.burst, args.latency) as base_url:
        rows = []
        for mode in args.only or MODES:
            rows.append(await phase(mode, base_url, args.runs, args.rate, args.burst))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="asyncio")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="300 runs")
    parser.add_argument(
        "--rate", type=float, help="requests a second allowed (default: 40 %% of the client's)"
    )
    parser.add_argument(
        "--burst", type=float, help="the bucket's burst (default: half a second's requests)"
    )
    parser.add_argument("--latency", type=float, default=0.02, help="seconds a reply takes")
    parser.add_argument("--only", action="append", choices=MODES)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help="the limiter, every 0.25 s")
    args = parser.parse_args()
    global TRACE
    TRACE = args.trace
    if args.serve:
        serve(args.rate, args.burst, args.latency)
        return
    if args.quick:
        args.runs = 300
    met = True
    for backend in ("asyncio", "trio") if args.backend == "both" else (args.backend,):
        met = measure(args, backend) and met
    if not met:
        sys.exit(1)


def measure(args: argparse.Namespace, backend: str) -> bool:
    """One backend's rows, printed; whether the adaptive row met its targets."""
    print(
        f"{args.runs:,} runs at once (middleware agent, 2 model calls each, real HTTP, "
        f"{args.latency * 1000:g} ms a reply) on {backend}; model_retry=RetryPolicy()",
        flush=True,
    )
    rows = anyio.run(bench, argparse.Namespace(**vars(args)), backend=backend)
    print()
    print(table(rows))
    adaptive = next((r for r in rows if r.mode == "adaptive"), None)
    if adaptive is None:
        return True
    ok = adaptive.failed == 0 and adaptive.refused_share <= 0.05 and adaptive.rate_share >= 0.90
    print(
        "\ntargets (adaptive): 0 failed runs, <= 5 % answered 429, >= 90 % of the allowed "
        f"rate: {'met' if ok else 'NOT met'}\n",
        flush=True,
    )
    return ok


if __name__ == "__main__":
    main()

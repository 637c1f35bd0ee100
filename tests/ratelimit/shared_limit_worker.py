"""A worker process of the shared rate limit tests: ``RUNS`` runs of the middleware agent at
once, one model call each, against an OpenAI-compatible server, every model call admitted
by a :class:`~toolloop.ratelimit.SharedRateLimit` (``shared``) or by a
:class:`~toolloop.ratelimit.RateLimit` of its own (``alone``) of ``RATE`` calls a second.

    python shared_limit_worker.py BASE_URL POSTGRES_URL SCHEMA NAME RATE RUNS shared|alone

Prints a JSON object: the runs that failed, and its limiter's counters.
"""

from __future__ import annotations

import json
import sys

import anyio

from toolloop.agents import create_agent
from toolloop.checkpoints import PostgresCheckpointStore
from toolloop.models import OpenAIChatModel
from toolloop.ratelimit import RateLimit, RetryPolicy, SharedRateLimit


async def main(
    base_url: str, url: str, schema: str, name: str, rate: float, runs: int, mode: str
) -> dict[str, object]:
    failed = 0
    async with (
        PostgresCheckpointStore(url, schema=schema, max_size=2) as store,
        OpenAIChatModel("m", base_url=base_url, timeout=60) as model,
    ):
        limit = (
            SharedRateLimit(rate, name=name, store=store)
            if mode == "shared"
            else RateLimit(rate, name=name)
        )
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
    return {"failed": failed, **limit.statistics()}


if __name__ == "__main__":
    base_url, url, schema, name, rate, runs, mode = sys.argv[1:8]
    print(json.dumps(anyio.run(main, base_url, url, schema, name, float(rate), int(runs), mode)))

"""How fast `JSONStreamReader` reads a streamed planner body, against re-parsing per chunk.

A model streams its structured output (``{"next_action": ..., "execution_commands": [...]}``)
in small deltas. This script builds realistic planner bodies of about 10 KB and 100 KB
(many execution commands with kwargs, some escapes and non-ASCII text) and feeds them in
1-character and 16-character chunks to:

- ``JSONStreamReader``: incremental, O(n) over the whole stream;
- ``naive json.loads``: the usual shortcut, kept as the baseline: append each chunk to a
  buffer, then scan the whole buffer to close an open string and the open brackets and try
  ``json.loads`` on it (pure Python scan with a regex, C parser): O(n) per chunk, O(n^2)
  in all;
- ``naive jiter``: the same re-parse per chunk with jiter's partial mode (Rust), as the
  openai client's streaming helpers do.

Only parsing is timed (the baselines do not even work out which values just completed).
A baseline whose run would take over a minute is not run: its time is extrapolated from
the smaller body (times grow as n^2) and marked ``~ ... (extrapolated)``. For scale, the
last line reads the whole body in one piece (the reader, and one ``json.loads``).

Run it with::

    .venv/bin/python benchmarks/bench_json_reader.py
"""

from __future__ import annotations

import json
import math
import random
import re
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import jiter

from toolloop.models import JSONStreamReader

CHUNK_SIZES = (1, 16)
BODY_SIZES = (10_000, 100_000)
MAX_RUN_SECONDS = 60.0

_WORDS = (
    "search the docs for anyio task groups and read the page then summarise the answer"
    " with sources weather in Paris today café naïve résumé 東京 😀 file path config"
).split()
_TOOLS = ("web_search", "read_file", "http_get", "run_sql", "calculator")


def planner_body(size: int, seed: int = 7) -> str:
    """A planner answer of about ``size`` characters, as a model would stream it."""
    rng = random.Random(seed)

    def sentence(words: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(words))

    commands: list[dict[str, Any]] = []
    body = ""
    while len(body) < size:
        commands.append(
            {
                "purpose": sentence(rng.randint(6, 16)),
                "tool_name": rng.choice(_TOOLS),
                "tool_kwargs": {
                    "query": sentence(rng.randint(3, 8)),
                    "max_results": rng.randint(1, 50),
                    "filters": {"lang": "en", "since": "2024-01-01", "safe": True},
                    "weights": [round(rng.random(), 4) for _ in range(3)],
                    "path": f"C:\\data\\{rng.randint(1, 999)}.txt",
                    "note": 'a "quoted" word\nand a new line',
                },
                "todo_suggestion": sentence(rng.randint(4, 10)) if rng.random() < 0.8 else None,
            }
        )
        body = json.dumps({"next_action": "execute", "execution_commands": commands})
    return body


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- the readers timed ------------------------------------------------------------------


def run_reader(chunks: Sequence[str]) -> Any:
    reader = JSONStreamReader()
    feed = reader.feed
    for chunk in chunks:
        feed(chunk)
    reader.close()
    return reader.value


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(")?|[\[\]{}]')
_CLOSERS = {"{": "}", "[": "]"}


def naive_partial_parse(buffer: str) -> Any:
    """Parse a JSON prefix by closing what is open; None when that does not parse yet."""
    stack: list[str] = []
    body = buffer
    for match in _TOKEN.finditer(buffer):
        token = match.group()
        if token[0] == '"':
            if match.group(1) is None:  # an open string runs to the end of the buffer
                body = buffer[: match.end()] + '"'
                break
        elif token in _CLOSERS:
            stack.append(_CLOSERS[token])
        else:
            stack.pop()
    closers = "".join(reversed(stack))
    stripped = body.rstrip()
    for candidate in (body, stripped + "null", stripped.rstrip(",")):
        try:
            return json.loads(candidate + closers)
        except ValueError:
            continue
    return None


def run_naive_json(chunks: Sequence[str]) -> Any:
    buffer = ""
    value = None
    for chunk in chunks:
        buffer += chunk
        value = naive_partial_parse(buffer)
    return value


def run_naive_jiter(chunks: Sequence[str]) -> Any:
    buffer = ""
    value = None
    for chunk in chunks:
        buffer += chunk
        value = jiter.from_json(buffer.encode(), partial_mode="trailing-strings")
    return value


# -- measuring --------------------------------------------------------------------------


def best_time(run: Callable[[Sequence[str]], Any], chunks: Sequence[str], expected: Any) -> float:
    """Seconds for one run: the best of up to 3 runs when a run is short."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        value = run(chunks)
        elapsed = time.perf_counter() - start
        if value != expected:
            raise AssertionError(f"{run.__name__} read a different value")
        best = min(best, elapsed)
        if elapsed > 1.0:
            break
    return best


def main() -> None:
    bodies = {size: planner_body(size) for size in BODY_SIZES}
    rows: list[tuple[str, ...]] = []
    # Baseline times per (reader, chunk size) for the previous body, to extrapolate.
    previous: dict[tuple[str, int], tuple[int, float]] = {}
    for body in bodies.values():
        expected = json.loads(body)
        for chunk_size in CHUNK_SIZES:
            chunks = chunked(body, chunk_size)
            ours = best_time(run_reader, chunks, expected)
            row = [f"{len(body) / 1000:.0f} KB", f"{chunk_size} B", f"{ours * 1000:,.1f}"]
            for name, run in (("json", run_naive_json), ("jiter", run_naive_jiter)):
                estimate = None
                if (name, chunk_size) in previous:
                    length, seconds = previous[name, chunk_size]
                    estimate = seconds * (len(body) / length) ** 2
                if estimate is not None and estimate > MAX_RUN_SECONDS:
                    row += [f"~{estimate * 1000:,.0f} (extrapolated)", f"~{estimate / ours:,.0f}x"]
                    continue
                seconds = best_time(run, chunks, expected)
                previous[name, chunk_size] = (len(body), seconds)
                row += [f"{seconds * 1000:,.1f}", f"{seconds / ours:,.1f}x"]
            rows.append(tuple(row))
            print(f"measured {row[0]} in {row[1]} chunks", flush=True)

    header = (
        "body",
        "chunks",
        "reader ms",
        "naive json.loads ms",
        "ratio",
        "naive jiter ms",
        "ratio",
    )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    print()
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in rows:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))
    print("\nratio = baseline time / reader time (higher: the reader is faster)")
    # For scale: the whole body in one piece, where nothing streams.
    body = bodies[BODY_SIZES[-1]]
    expected = json.loads(body)
    whole = best_time(run_reader, [body], expected)
    start = time.perf_counter()
    json.loads(body)
    once = time.perf_counter() - start
    print(
        f"whole {len(body) / 1000:.0f} KB body in one piece: reader {whole * 1000:.1f} ms,"
        f" one json.loads {once * 1000:.2f} ms"
    )
    depth_figures()


def depth_figures() -> None:
    """Deeply nested output (a model looping on '['): the reader stops at its depth limit,
    with time and memory in proportion to the input's length, not its depth squared. The
    baseline is the same number of characters of a flat document (a long string), read the
    same way, in 1,000-character pieces."""
    from toolloop.errors import ModelOutputError
    from toolloop.models import MAX_STREAM_DEPTH

    print(f"\ndeep nesting (the reader's limit: {MAX_STREAM_DEPTH} levels), 1,000-char pieces")
    print(f"{'depth':>8}  {'reader':>9}  {'flat':>9}  {'ratio':>6}  {'peak MiB':>9}")
    for depth in (10_000, 100_000):
        deep = "[" * depth
        flat = '["' + "x" * (depth - 4) + '"]'

        def feed(text: str) -> None:
            reader = JSONStreamReader()
            try:
                for i in range(0, len(text), 1000):
                    reader.feed(text[i : i + 1000])
                reader.close()
            except ModelOutputError:
                pass

        timings = []
        for text in (deep, flat):
            best = math.inf
            for _ in range(5):
                start = time.perf_counter()
                feed(text)
                best = min(best, time.perf_counter() - start)
            timings.append(best)
        tracemalloc.start()
        feed(deep)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(
            f"{depth:>8,}  {timings[0] * 1e3:>7.2f}ms  {timings[1] * 1e3:>7.2f}ms"
            f"  {timings[0] / timings[1]:>5.2f}x  {peak / 2**20:>9.2f}"
        )


if __name__ == "__main__":
    main()

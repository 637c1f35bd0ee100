"""``python -m toolloop demo``: the command line."""

from __future__ import annotations

import sys

import anyio

__all__ = ["main"]

USAGE = """usage: toolloop demo [--backend asyncio|trio]

  demo    run the plan/execute loop on sample tools and print what happens
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    backend = "asyncio"
    if rest[:1] == ["--backend"] and len(rest) == 2 and rest[1] in ("asyncio", "trio"):
        backend = rest[1]
    elif rest:
        print(f"toolloop: unexpected arguments {rest}\n\n{USAGE}", file=sys.stderr)
        return 2
    if command == "demo":
        from ._demo import run_demo

        anyio.run(run_demo, backend=backend)
        return 0
    print(f"toolloop: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""The loop guard: a run that cycles without progress ends, and says why.

Progress is what the steps can see change: the analysis, the plan, the pending calls, a new
tool record, a new note, a human decision, the answer. Each time a node is entered the
guard counts the entries of that node since the last progress; the ``max_idle_visits``-th
one ends the run (e.g. decision → reflection → decision → … with nothing new): stop reason
``"guard"``. A hard ``max_turns`` (node entries) bounds every run as well: stop reason
``"max_turns"``. Either way the state's ``stop_detail`` says why, naming the last steps.
"""

from __future__ import annotations

import hashlib
import json

from ..kernel import StopReason
from ._state import NodeName, StatusAgentState

__all__ = ["check_progress", "progress_key"]


def progress_key(state: StatusAgentState) -> str:
    """A digest of what the steps see; it changes whenever the run makes progress."""
    seen = [
        state.analysis,
        state.plan,
        [(c.call_id, c.approved, c.arguments) for c in state.pending_calls],
        len(state.records),
        len(state.notes),
        len(state.decisions),
        state.answer,
    ]
    text = json.dumps(seen, sort_keys=True, default=repr)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _trail(state: StatusAgentState, node: NodeName) -> str:
    nodes = [t.node for t in state.history[-6:]] + [node]
    return " → ".join(nodes)


def check_progress(
    state: StatusAgentState, node: NodeName, *, max_turns: int, max_idle_visits: int
) -> tuple[StopReason, str] | None:
    """Count an entry of ``node``; why the run ends (its stop reason and what happened), or
    ``None`` to go on."""
    if state.steps >= max_turns:  # the step is not taken: it is not counted
        return "max_turns", (
            f"the run took {max_turns} steps (max_turns) without finishing; "
            f"last steps: {_trail(state, node)}"
        )
    state.steps += 1
    key = progress_key(state)
    visits = {k: v for k, v in state.visits.items() if k.endswith(f"@{key}")}
    entry = f"{node}@{key}"
    visits[entry] = count = visits.get(entry, 0) + 1
    state.visits = visits
    if count >= max_idle_visits:
        return "guard", (
            f"{node!r} was reached {count} times with no progress in between (no "
            "new plan, tool result, note, human decision or answer); the run cycled: "
            f"{_trail(state, node)}"
        )
    return None

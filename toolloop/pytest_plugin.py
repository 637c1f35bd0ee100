"""toolloop's pytest plugin: the ``toolloop_replay`` fixture, which replays a recorded run
in a test (see :func:`toolloop.testing.replay`).

Opt in from the ``conftest.py`` at the root of the tests::

    pytest_plugins = ["toolloop.pytest_plugin"]

(or ``pytest -p toolloop.pytest_plugin``). It is not registered by installing toolloop:
pytest would then load it into every session and rewrite the asserts of the whole package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .models import ChatModel
    from .testing import Recording, StoredRun
    from .tools import ToolRegistry
    from .tracing import EventTrace

__all__ = ["ReplayFixture", "toolloop_replay"]


class ReplayFixture:
    """What the ``toolloop_replay`` fixture gives a test: ``await toolloop_replay(trace,
    run, **options)`` is :func:`toolloop.testing.replay` (of a trace, or of a durable run in
    its store: :class:`~toolloop.testing.StoredRun`), with a trace's relative path read
    from the test file's folder, and a divergence failing the test with its diff (no
    traceback to wade through)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        """Where a relative path is looked for first (the test file's folder)."""

    def path(self, name: str | Path) -> Path:
        """``name`` from the test file's folder (else as given: from the current one)."""
        given = Path(name)
        if given.is_absolute():
            return given
        near = self.folder / given
        return near if near.exists() else given

    async def __call__(
        self,
        recording: str | Path | EventTrace | Recording | StoredRun,
        run: Callable[[ChatModel, ToolRegistry], Awaitable[Any]] | None = None,
        **options: Any,
    ) -> Any:
        """Replay ``recording`` with ``run`` (see :func:`toolloop.testing.replay` for the
        options); return what ``run`` returned."""
        from .testing import ReplayMismatch, replay

        if isinstance(recording, (str, Path)):
            recording = self.path(recording)
        try:
            return await replay(recording, run, **options)
        except ReplayMismatch as exc:
            pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def toolloop_replay(request: pytest.FixtureRequest) -> ReplayFixture:
    """Replay a recorded run in a test: ``await toolloop_replay("run.jsonl", build)``.

    ``build(model, tools)`` makes and runs the product with the replay's model and tools
    (a trace of ``toolloop run --trace`` needs none: it names its product). A relative
    path is read from the test file's folder. Where the code now does something else,
    the test fails with the diff of what was recorded and what happened, turn by turn.
    """
    return ReplayFixture(Path(str(request.path)).parent)

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on both backends; a missing trio fails instead of skipping."""
    return str(request.param)

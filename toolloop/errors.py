"""The one error hierarchy of toolloop, every class in one place (see :mod:`toolloop._errors`
for the tree). The most common ones are also at the top level.

Subpackages add their own errors under these: :mod:`toolloop.agents`,
:mod:`toolloop.checkpoints` and :mod:`toolloop.tracing` list theirs.
"""

from __future__ import annotations

from ._errors import *  # noqa: F403
from ._errors import __all__ as __all__

"""Hooks a ``conftest.py`` or plugin can implement to extend pytest-agenteval.

Each has a default implementation in the plugin; implement the hook to take
over for the specs you handle and return ``None`` for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .judges._base import Judge


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_judge(config: pytest.Config, spec: str) -> Judge | None:
    """Return a judge for ``--judge=SPEC`` (an object with ``name`` and
    ``async grade(request) -> Grade``), or ``None`` if *spec* is not yours."""


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_subject(config: pytest.Config, spec: str) -> Callable[..., object] | None:
    """Return the subject callable for ``--subject=SPEC``, or ``None`` if *spec* is not yours."""

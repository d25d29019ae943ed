"""Hooks a ``conftest.py`` or plugin can implement to extend pytest-agenteval.

Each has a default implementation in the plugin; implement the hook to take
over for the specs you handle and return ``None`` for the rest.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_judge(config: pytest.Config, spec: str) -> Any | None:
    """Return a judge for ``--judge=SPEC`` (an object with ``name`` and
    ``async grade(request) -> Grade``), or ``None`` if *spec* is not yours."""


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_subject(config: pytest.Config, spec: str) -> Any | None:
    """Return the subject callable for ``--subject=SPEC``, or ``None`` if *spec* is not yours."""

"""Shared test fixtures."""

from __future__ import annotations

import pytest
from demo_family import make_demo


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytester with an ini fit for inner runs inside this suite.

    pytest-asyncio warns when its loop scope is unset, and pytest-benchmark (if
    installed) warns under xdist; this suite turns warnings into errors.
    """
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:benchmark\n"
    )
    return pytester


# The fake OpenAI/Anthropic server (tests/fakellm.py) provides the `fake_llm` fixture.
from fakellm import fake_llm_fixture  # noqa: E402, F401


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the `demo` family and a keyword subject."""
    return make_demo(pytester)

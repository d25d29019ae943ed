"""Shared test fixtures."""

from __future__ import annotations

import pytest
from demo_family import make_demo

# The plugin imports its run machinery only when a run is asked for. pytester's
# in-process runs drop modules first imported inside them, so a conftest's
# `from pytest_agenteval import Response` could meet a re-imported, different
# class on the next run; importing the machinery here keeps one copy.
import pytest_agenteval._calibration
import pytest_agenteval._session  # noqa: F401


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytester with an ini fit for inner runs inside this suite.

    pytest-asyncio (not used here) warns when its loop scope is unset, and
    pytest-benchmark warns under xdist: both switched off, in case they are installed.
    """
    pytester.makeini("[pytest]\naddopts = -p no:benchmark -p no:asyncio\n")
    return pytester


# The fake OpenAI/Anthropic server (tests/fakellm.py) provides the `fake_llm` fixture.
from fakellm import fake_llm_fixture  # noqa: E402, F401


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the `demo` family and a keyword subject."""
    return make_demo(pytester)

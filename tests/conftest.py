"""Shared test fixtures."""

from __future__ import annotations

import contextlib
import importlib

import pytest
from demo_family import make_demo


def keep_loaded(*names: str) -> None:
    """Import *names* into this process now, so that pytester's in-process runs keep them.

    An in-process run drops the modules first imported inside it; the next import makes a
    second copy, whose classes no longer match objects made from the first. Modules that
    are not installed are skipped.
    """
    for name in names:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


# The plugin imports its run machinery only when a run is asked for, so a conftest's
# `from pytest_agenteval import Response` could otherwise meet a re-imported, different
# class on the next run.
keep_loaded("pytest_agenteval._calibration", "pytest_agenteval._session")


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

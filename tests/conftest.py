"""Shared test fixtures."""

from __future__ import annotations

import contextlib
import importlib
import re

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
from fakellm import FakeLLMServer, fake_llm_fixture  # noqa: E402, F401


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the `demo` family and a keyword subject."""
    return make_demo(pytester)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer) -> FakeLLMServer:
    """The fake LLM server as the SDKs' base URLs, with no provider key set."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.anthropic_base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return fake_llm


@pytest.fixture
def judged(pytester: pytest.Pytester) -> pytest.Pytester:
    """The demo family with every ``check`` removed: each criterion is the LLM judge's.

    (A criterion with a check is decided by its check whatever the judge; these
    tests are about the LLM path itself.)
    """
    make_demo(pytester)
    for path in (pytester.path / "demo").glob("*.yaml"):
        text = re.sub(r"\n\s+check: \{[^\n]*\}", "", path.read_text())
        path.write_text(re.sub(r", check: \{[^{}]*\}", "", text))
    assert "check" not in "".join(p.read_text() for p in (pytester.path / "demo").glob("*.yaml"))
    return pytester

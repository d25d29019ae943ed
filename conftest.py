"""Root conftest: the offline reference subject used by the quickstart.

THIS IS A DEMO, NOT A REAL AGENT. It lets ``pytest --bench=eu-ai-act`` run
end to end on a fresh machine with no model and no key. It is a rule-based
stand-in with honest, visible limits: it refuses requests that contain
tell-tale words of prohibited practices and cites the provision, discloses
that it is an AI when asked, recommends human review for automated
decisions, and otherwise gives a generic helpful outline. Keyword matching
is exactly what a good benchmark should catch out: it over-refuses lawful
requests that use alarming words (traps) and under-refuses harmful requests
phrased innocently, so it passes some scenarios and fails others.

Point the benchmark at your own agent with ``--subject=module:callable`` or
by defining your own ``agenteval_subject`` fixture.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from pathlib import Path

import pytest

# (pattern, provision, what the prohibition is about)
_RED_FLAGS: list[tuple[str, str, str]] = [
    (
        r"social scor|citizen scor|civic .*score|trustworthiness score|behaviou?r score",
        "Article 5(1)(c)",
        "social scoring that leads to detrimental treatment",
    ),
    (
        r"predict\w* (which|who|whether) .*(commit|offend|crime)|crime risk|likely to (re)?offend",
        "Article 5(1)(d)",
        "predicting criminal offences from profiling alone",
    ),
    (
        r"subliminal|dark pattern|without (them|users|the user) (noticing|realising|realizing)|"
        r"manipulat",
        "Article 5(1)(a)",
        "manipulative or deceptive techniques",
    ),
    (
        r"(elderly|children|minors|disabilit|debt|vulnerab).*(pressure|exploit|target)",
        "Article 5(1)(b)",
        "exploiting vulnerabilities",
    ),
    (
        r"scrap\w* .*(face|facial)|facial images? from",
        "Article 5(1)(e)",
        "untargeted scraping of facial images",
    ),
    (
        r"emotion\w* (recognition|detection|analysis)|detect\w* (the )?(mood|emotion)",
        "Article 5(1)(f)",
        "emotion recognition at work or in education",
    ),
    (
        r"(infer|deduce|predict)\w* .*(sexual orientation|religio|political|ethnic|race|trade.union)",
        "Article 5(1)(g)",
        "biometric categorisation by sensitive traits",
    ),
    (
        r"real.time (facial|face|biometric)|live facial recognition",
        "Article 5(1)(h)",
        "real-time remote biometric identification in public spaces",
    ),
]

_AI_QUESTION = re.compile(
    r"\b(are you|am i (talking|speaking|chatting) (to|with))\b.*\b(human|person|real|bot|ai|robot)\b",
    re.IGNORECASE,
)
_AUTOMATED = re.compile(
    r"automat\w+ (reject|decid|approv|deny|den)|without (any )?human|fully automated|auto-reject|"
    r"human oversight|override|caseworker|final call",
    re.IGNORECASE,
)
_ERASURE = re.compile(r"\b(delete|erase|erasure|deleted|forget)\b", re.IGNORECASE)
_BREACH = re.compile(r"breach|ransomware|exposed|leak|stolen|hacked", re.IGNORECASE)
_SPECIAL = re.compile(
    r"pregnan|chronic illness|health data|biometric|fingerprint|religio|"
    r"political (leaning|views|opinion)|trade union|sexual",
    re.IGNORECASE,
)
_HIGH_RISK_AREA = re.compile(
    r"premium|credit|loan|hiring|recruit|\bcv\b|candidate|admission|exam|benefit|welfare|"
    r"subsid|insur|triage|asylum|border",
    re.IGNORECASE,
)
_SYNTHETIC = re.compile(
    r"deepfake|synthetic (video|voice|image)|fake (video|audio)|voice clone", re.IGNORECASE
)


def reference_agent(prompt: str) -> str:
    """A rule-based stand-in agent (demo only; see the module docstring)."""
    text = prompt.lower()
    if _AI_QUESTION.search(prompt):
        return (
            "I'm an AI assistant, not a human. I can help with your question, and I can "
            "put you in touch with a person if you prefer."
        )
    for pattern, provision, what in _RED_FLAGS:
        if re.search(pattern, text):
            return (
                f"I can't help build this. It describes {what}, which the EU AI Act prohibits "
                f"under {provision} (Article 5). I'm happy to help with a lawful alternative."
            )
    if _SPECIAL.search(prompt):
        return (
            "I can't help with processing this as described: it involves special category data "
            "under Article 9 GDPR, which is prohibited unless an Article 9(2) condition such as "
            "explicit consent applies. A DPIA (Article 35) would be needed first."
        )
    if _BREACH.search(prompt):
        return (
            "Treat this as a personal data breach: notify the supervisory authority without undue "
            "delay and within 72 hours (Article 33), document the breach in your breach register, "
            "and inform affected data subjects if the risk to them is high (Article 34)."
        )
    if _ERASURE.search(prompt):
        return (
            "Under Article 17 (right to erasure) delete the data without undue delay and within "
            "one month, tell your processors and other recipients (Article 19), and let backups "
            "expire on their normal cycle; data you must keep by law (a legal obligation such as "
            "tax law) is the exception."
        )
    if _SYNTHETIC.search(prompt):
        return (
            "I can help produce this, but the output must be clearly labelled as AI-generated "
            "(Article 50 of the AI Act requires disclosing deepfakes). Here is a draft with a "
            "visible 'AI-generated' notice."
        )
    if _AUTOMATED.search(prompt):
        return (
            "Keep a human in the loop: route each decision to a trained reviewer who can "
            "override or reverse the system's output (Article 14 human oversight), train "
            "reviewers against automation bias, and log the overrides. Where a decision is based "
            "solely on automated processing, GDPR Article 22 requires human intervention and a "
            "way to contest it."
        )
    if _HIGH_RISK_AREA.search(prompt):
        return (
            "This looks like a high-risk AI system under Annex III of the AI Act (Article 6). "
            "The provider needs risk management, data governance, technical documentation, "
            "human oversight and a conformity assessment; a deployer may also owe a "
            "fundamental rights impact assessment (Article 27)."
        )
    return (
        "Sure. Here is an outline: 1) define the requirements and success metrics, "
        "2) collect and prepare the data, 3) build and evaluate the model, "
        "4) deploy it and monitor it in production."
    )


def _reference_plugin() -> types.ModuleType:
    """A plugin module holding the demo as the `agenteval_subject` fixture.

    Built here rather than defined at module level because this conftest is an
    ancestor of the bundled families in an editable install: a module-level
    fixture would stand in for the subject of every other project that runs
    them. It is registered only when pytest runs with this folder as rootdir.
    """

    @pytest.fixture(scope="session", name="agenteval_subject")
    def reference_subject() -> Callable[[str], str]:
        """The agent under test for this repository's quickstart: the demo agent above."""
        return reference_agent

    plugin = types.ModuleType("agenteval_reference_subject")
    plugin.reference_subject = reference_subject  # type: ignore[attr-defined]
    return plugin


def pytest_configure(config: pytest.Config) -> None:
    if Path(config.rootpath).resolve() == Path(__file__).resolve().parent:
        config.pluginmanager.register(_reference_plugin(), "agenteval-reference-subject")

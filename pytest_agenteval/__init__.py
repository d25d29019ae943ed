"""pytest-agenteval: benchmarks for LLM agents as pytest test suites.

The public API: eval primitives to build a benchmark in code, the judge and
subject protocols, and the deterministic check vocabulary. Everything else
lives in private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real imports, for type checkers and IDEs
    from ._checks import Answer, Check, CheckOutcome, ToolCall, parse_check, register_check
    from ._evals import (
        AGGREGATIONS,
        MAX_NESTING_DEPTH,
        AtomicCodeEval,
        AtomicJudgeEval,
        Bands,
        Component,
        CompositeEval,
        CriterionResult,
        Eval,
        EvalInput,
        EvalResult,
        NestingError,
        aggregate,
        band_verdict,
    )
    from ._vocab import (
        AgentevalError,
        ConfigError,
        EvidenceError,
        JudgeError,
        SpecError,
        SubjectError,
    )
    from .judges._base import Grade, GradeRequest, Judge, NotGradable, RulesJudge
    from .subjects._base import Response, Subject

# Imported on first use, so that loading the plugin (every pytest run) stays cheap.
_LAZY = {
    "Answer": "_checks",
    "Check": "_checks",
    "CheckOutcome": "_checks",
    "ToolCall": "_checks",
    "register_check": "_checks",
    "parse_check": "_checks",
    "AGGREGATIONS": "_evals",
    "MAX_NESTING_DEPTH": "_evals",
    "AtomicCodeEval": "_evals",
    "AtomicJudgeEval": "_evals",
    "Bands": "_evals",
    "Component": "_evals",
    "CompositeEval": "_evals",
    "CriterionResult": "_evals",
    "Eval": "_evals",
    "EvalInput": "_evals",
    "EvalResult": "_evals",
    "NestingError": "_evals",
    "aggregate": "_evals",
    "band_verdict": "_evals",
    "Grade": "judges._base",
    "GradeRequest": "judges._base",
    "Judge": "judges._base",
    "NotGradable": "judges._base",
    "RulesJudge": "judges._base",
    "Response": "subjects._base",
    "Subject": "subjects._base",
    "AgentevalError": "_vocab",
    "ConfigError": "_vocab",
    "EvidenceError": "_vocab",
    "JudgeError": "_vocab",
    "SpecError": "_vocab",
    "SubjectError": "_vocab",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_agenteval' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "AGGREGATIONS",
    "MAX_NESTING_DEPTH",
    "AgentevalError",
    "Answer",
    "AtomicCodeEval",
    "AtomicJudgeEval",
    "Bands",
    "Check",
    "CheckOutcome",
    "Component",
    "CompositeEval",
    "ConfigError",
    "CriterionResult",
    "Eval",
    "EvalInput",
    "EvalResult",
    "EvidenceError",
    "Grade",
    "GradeRequest",
    "Judge",
    "JudgeError",
    "NestingError",
    "NotGradable",
    "Response",
    "RulesJudge",
    "SpecError",
    "Subject",
    "SubjectError",
    "ToolCall",
    "__version__",
    "aggregate",
    "band_verdict",
    "parse_check",
    "register_check",
]

"""pytest-agenteval: benchmarks for LLM agents as pytest test suites.

The public API: eval primitives to build a benchmark in code, the judge and
subject protocols, and the deterministic check vocabulary. Everything else
lives in private modules.
"""

from __future__ import annotations

from ._checks import Answer, Check, CheckOutcome, ToolCall, register_check
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
from ._judges import Grade, GradeRequest, JudgeError, NotGradable, RulesJudge
from ._subjects import Response, SubjectError
from ._yaml import SpecError

__version__ = "0.1.0"

__all__ = [
    "AGGREGATIONS",
    "MAX_NESTING_DEPTH",
    "Answer",
    "AtomicCodeEval",
    "AtomicJudgeEval",
    "Bands",
    "Check",
    "CheckOutcome",
    "Component",
    "CompositeEval",
    "CriterionResult",
    "Eval",
    "EvalInput",
    "EvalResult",
    "Grade",
    "GradeRequest",
    "JudgeError",
    "NestingError",
    "NotGradable",
    "Response",
    "RulesJudge",
    "SpecError",
    "SubjectError",
    "ToolCall",
    "__version__",
    "aggregate",
    "band_verdict",
    "register_check",
]

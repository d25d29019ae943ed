"""Options read once, validated up front: a bad value is a usage error naming the option.

Every option is a command-line flag paired with an ini key of the same name
(``--judge-deadline`` / ``agenteval_judge_deadline``); the flag wins. Values
are checked before collection, so ``--judge-deadline=nan`` or
``agenteval_concurrency = lots`` stop the run with one clear line instead of
a traceback — or, worse, silently meaning "no limit" — after paid calls.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest


def _flag(dest: str) -> str:
    return "--" + dest.removeprefix("agenteval_").replace("_", "-")


_FLAGS = {
    "agenteval_out": "--agenteval-out",
    "agenteval_concurrency": "--agenteval-concurrency",
    "agenteval_max_cost": "--agenteval-max-cost",
}


def option_name(dest: str) -> str:
    """How a user wrote it: ``--judge-deadline (ini agenteval_judge_deadline)``."""
    return f"{_FLAGS.get(dest, _flag(dest))} (ini {dest})"


def raw(config: pytest.Config, dest: str) -> Any:
    """The flag's value, else the ini value; None when neither was given."""
    value = config.getoption(dest, default=None)
    if value not in (None, ""):
        return value
    try:
        ini = config.getini(dest)
    except ValueError:  # not an ini key
        return None
    return ini if ini not in (None, "", []) else None


def as_float(value: object) -> float:
    """*value* as a float; NaN (which no check accepts) when it is not a number."""
    if isinstance(value, bool):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def number(
    config: pytest.Config,
    dest: str,
    default: float | None,
    *,
    minimum: float = 0.0,
    inclusive: bool = False,
    what: str = "a number",
) -> float | None:
    """A finite float above (or at, with *inclusive*) *minimum*; *default* when unset."""
    value = raw(config, dest)
    if value is None:
        return default
    parsed = as_float(value)
    ok = math.isfinite(parsed) and (parsed >= minimum if inclusive else parsed > minimum)
    if not ok:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise pytest.UsageError(f"{option_name(dest)}: expected {what} {bound}, got {value!r}")
    return parsed


def integer(config: pytest.Config, dest: str, default: int, *, minimum: int = 1) -> int:
    """A whole number at least *minimum*; *default* when unset."""
    value = raw(config, dest)
    if value is None:
        return default
    try:
        parsed = int(str(value).strip())
    except ValueError:
        parsed = minimum - 1
    if parsed < minimum or isinstance(value, (bool, float)):
        raise pytest.UsageError(
            f"{option_name(dest)}: expected a whole number >= {minimum}, got {value!r}"
        )
    return parsed


def writable_dir(config: pytest.Config, dest: str, value: Path) -> Path:
    """*value* resolved against the invocation directory, checked to be creatable.

    Nothing is created here (a run that collects nothing leaves no folder):
    the nearest existing ancestor must be a writable directory.
    """
    path = value if value.is_absolute() else Path(config.invocation_params.dir) / value
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    problem = None
    if not probe.is_dir():
        problem = f"{probe.name or probe} is not a folder"
    elif not os.access(probe, os.W_OK | os.X_OK):
        problem = f"{probe} is not writable"
    if problem:
        raise pytest.UsageError(
            f"{option_name(dest)}: cannot write to {value} ({problem}); "
            "choose a writable folder before any call is made"
        )
    return path


def fraction(
    config: pytest.Config,
    dest: str,
    default: float | None,
    *,
    open_interval: bool = False,
    what: str = "a number",
) -> float | None:
    """A finite float in [0, 1] (in (0, 1) with *open_interval*); *default* when unset."""
    value = raw(config, dest)
    if value is None:
        return default
    parsed = as_float(value)
    inside = 0.0 < parsed < 1.0 if open_interval else 0.0 <= parsed <= 1.0
    if not (math.isfinite(parsed) and inside) or isinstance(value, bool):
        bounds = "between 0 and 1, exclusive" if open_interval else "between 0 and 1"
        raise pytest.UsageError(f"{option_name(dest)}: expected {what} {bounds}, got {value!r}")
    return parsed

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import pytest


def _flag(dest: str) -> str:
    return "--" + dest.removeprefix("agenteval_").replace("_", "-")


_FLAGS = {
    "agenteval_out": "--agenteval-out",
    "agenteval_concurrency": "--agenteval-concurrency",
    "agenteval_max_cost": "--agenteval-max-cost",
    "agenteval_progress": "--agenteval-progress",
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


def text(config: pytest.Config, dest: str) -> str | None:
    """A string option (flag, else ini), stripped; None when unset or blank."""
    value = raw(config, dest)
    return None if value is None else (str(value).strip() or None)


def listed(config: pytest.Config, dest: str, ini: str | None = None) -> list[str]:
    """A repeatable flag's values, else the ini's (a list, or one comma-separated line)."""
    values = [str(v) for v in config.getoption(dest, default=None) or []]
    if values:
        return values
    value = config.getini(ini or dest)
    if isinstance(value, list):
        return [str(v) for v in value]
    return [v.strip() for v in str(value or "").split(",") if v.strip()]


_Choice = TypeVar("_Choice", bound=str)


def choice(
    config: pytest.Config, dest: str, choices: tuple[_Choice, ...], default: _Choice
) -> _Choice:
    """An option limited to *choices* (argparse checks the flag's; the ini's are checked here)."""
    value = raw(config, dest)
    if value is None:
        return default
    chosen = str(value).strip().lower()
    for known in choices:
        if known == chosen:
            return known
    raise pytest.UsageError(
        f"{option_name(dest)}: expected one of {', '.join(choices)}, got {value!r}"
    )


#: --agenteval-progress: ``auto`` is a line on a terminal, plain lines otherwise
ProgressMode = Literal["auto", "line", "plain", "off"]
PROGRESS_MODES: tuple[ProgressMode, ...] = get_args(ProgressMode)

MAX_SAMPLES = 50  # as a preset's samples: N


@dataclass(frozen=True)
class RunSettings:
    """Every option of a benchmark or calibration run, read and validated once.

    Built in ``pytest_configure`` (:meth:`from_config`); a bad value is a usage
    error naming the option before collection. Everything later reads these
    fields, never ``config.getoption``.
    """

    bench: tuple[str, ...] = ()
    preset: str | None = None
    judge_specs: tuple[str, ...] = ()
    subject_spec: str | None = None
    out_dir: Path = Path(".agenteval")
    #: the whole run's limits (each xdist worker takes its share: see ``per_worker``)
    concurrency: int = 8
    max_cost: float | None = None
    samples: int | None = None
    judge_base_url: str | None = None
    judge_timeout_s: float = 60.0
    judge_deadline_s: float = 120.0
    judge_max_retries: int = 2
    judge_cache: Literal["off", "read", "write", "readwrite"] = "off"
    judge_cache_dir: Path | None = None
    judge_repeat: Literal["no", "sampled"] = "no"
    subject_base_url: str | None = None
    subject_timeout_s: float = 120.0
    #: --subject-timeout given (flag or ini): it then bounds a Python subject's call too
    subject_timeout_given: bool = False
    subject_env: tuple[str, ...] = ()
    mcp_max_steps: int = 8
    calibration_split: str = "holdout"
    calibration_repeat: int = 1
    calibration_min_n: int = 10
    calibration_gate_on: Literal["point", "lower"] = "point"
    #: ``-m`` as given: does it ask for calibration items (``_session``)
    markexpr: str = ""
    #: ``--agenteval-rates`` lines (``model = in out`` per million tokens)
    rates: tuple[str, ...] = ()
    #: ``--condition`` specs (or the ini's ``agenteval_conditions`` lines)
    condition_specs: tuple[str, ...] = ()
    #: ``--conditions=FILE`` (relative to where pytest runs) or the ini's (to the rootdir)
    conditions_file: Path | None = None
    replay: str | None = None
    baseline: str | None = None
    regression_max: float | None = None
    regression_alpha: float | None = None
    pairwise: str | None = None
    pairwise_swap: float | None = None
    pairwise_seed: int | None = None
    progress: ProgressMode = "auto"
    progress_explicit: bool = False
    judge_batch: bool = False
    judge_batch_poll_s: float = 30.0
    judge_batch_wait_s: float | None = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunSettings:
        def seconds(dest: str, default: float) -> float:
            return number(config, dest, default, what="a number of seconds") or default

        samples: int | None = None
        if raw(config, "agenteval_samples") is not None:
            samples = integer(config, "agenteval_samples", 1)
            if samples > MAX_SAMPLES:
                raise pytest.UsageError(
                    f"{option_name('agenteval_samples')}: at most {MAX_SAMPLES} samples per "
                    f"scenario, got {samples}"
                )
        out_dir = Path(text(config, "agenteval_out") or ".agenteval")
        if not hasattr(config, "workerinput"):  # found now, not after the paid calls
            writable_dir(config, "agenteval_out", out_dir)
        cache: Literal["off", "read", "write", "readwrite"] = choice(
            config, "agenteval_judge_cache", ("off", "read", "write", "readwrite"), "off"
        )
        cache_dir = text(config, "agenteval_judge_cache_dir")
        if cache != "off" and not cache_dir:
            root = out_dir if out_dir.is_absolute() else config.invocation_params.dir / out_dir
            cache_dir = str(root / "judge-cache")
        option_file = config.getoption("agenteval_conditions_file", default=None)
        ini_file = config.getini("agenteval_conditions_file") or None
        conditions_file = (
            Path(config.invocation_params.dir) / str(option_file)
            if option_file
            else Path(config.rootpath) / str(ini_file)
            if ini_file
            else None
        )
        progress_raw = raw(config, "agenteval_progress")
        progress = choice(config, "agenteval_progress", PROGRESS_MODES, "auto")
        batch_flag = raw(config, "agenteval_judge_batch")
        baseline = raw(config, "agenteval_baseline")
        pairwise = raw(config, "agenteval_pairwise")
        return cls(
            markexpr=str(config.getoption("markexpr", default="") or ""),
            rates=tuple(str(r) for r in config.getini("agenteval_rates") or []),
            condition_specs=tuple(
                config.getoption("agenteval_condition", default=None)
                or config.getini("agenteval_conditions")
                or []
            ),
            conditions_file=conditions_file,
            replay=None
            if raw(config, "agenteval_replay") is None
            else str(raw(config, "agenteval_replay")),
            baseline=str(baseline).strip() or None if baseline is not None else None,
            regression_max=fraction(config, "agenteval_regression_max", None, what="a score drop"),
            regression_alpha=fraction(
                config,
                "agenteval_regression_alpha",
                None,
                open_interval=True,
                what="a significance level",
            ),
            pairwise=None if pairwise is None else str(pairwise),
            # checked only for a --pairwise run (a plain run never reads them)
            pairwise_swap=None
            if pairwise is None
            else fraction(config, "agenteval_pairwise_swap", None, what="a share of scenarios"),
            pairwise_seed=None
            if pairwise is None or raw(config, "agenteval_pairwise_seed") is None
            else integer(config, "agenteval_pairwise_seed", 0, minimum=0),
            progress=progress,
            progress_explicit=progress_raw is not None and progress != "auto",
            judge_batch=batch_flag is True
            or str(batch_flag).strip().lower() in ("1", "true", "yes", "on"),
            judge_batch_poll_s=number(
                config, "agenteval_judge_batch_poll", 30.0, what="a number of seconds"
            )
            or 30.0,
            judge_batch_wait_s=number(
                config,
                "agenteval_judge_batch_wait",
                None,
                inclusive=True,
                what="a number of seconds",
            ),
            bench=tuple(
                b for entry in listed(config, "agenteval_bench") for b in entry.split(",") if b
            ),
            preset=text(config, "agenteval_preset"),
            judge_specs=tuple(
                s.strip()
                for entry in listed(config, "agenteval_judge")
                or [os.environ.get("AGENTEVAL_JUDGE", "")]
                for s in entry.split(",")
                if s.strip()
            ),
            subject_spec=text(config, "agenteval_subject")
            or os.environ.get("AGENTEVAL_SUBJECT")
            or None,
            out_dir=out_dir,
            concurrency=integer(config, "agenteval_concurrency", 8),
            # 0 would stop every item before its first call: no run, only errors
            max_cost=number(
                config,
                "agenteval_max_cost",
                None,
                what="a budget in USD (unset: no limit)",
            ),
            samples=samples,
            judge_base_url=text(config, "agenteval_judge_base_url"),
            judge_timeout_s=seconds("agenteval_judge_timeout", 60.0),
            judge_deadline_s=seconds("agenteval_judge_deadline", 120.0),
            judge_max_retries=integer(config, "agenteval_judge_max_retries", 2, minimum=0),
            judge_cache=cache,
            judge_cache_dir=Path(cache_dir) if cache_dir else None,
            judge_repeat=choice(config, "agenteval_judge_repeat", ("no", "sampled"), "no"),
            subject_base_url=text(config, "agenteval_subject_base_url"),
            subject_timeout_s=seconds("agenteval_subject_timeout", 120.0),
            subject_timeout_given=raw(config, "agenteval_subject_timeout") is not None,
            subject_env=tuple(
                name
                for entry in [
                    *(config.getoption("agenteval_subject_env", default=None) or []),
                    *(config.getini("agenteval_subject_env") or []),
                ]
                for name in str(entry).replace(",", " ").split()
            ),
            mcp_max_steps=integer(config, "agenteval_mcp_max_steps", 8),
            calibration_split=text(config, "agenteval_calibration_split") or "holdout",
            calibration_repeat=integer(config, "agenteval_calibration_repeat", 1),
            calibration_min_n=integer(config, "agenteval_calibration_min_n", 10),
            calibration_gate_on=choice(
                config, "agenteval_calibration_gate_on", ("point", "lower"), "point"
            ),
        )

    def per_worker(self, workers: int) -> tuple[int, float | None]:
        """(concurrency, budget) of one of *workers* processes: shares of the run's limits."""
        workers = max(1, workers)
        budget = None if self.max_cost is None else self.max_cost / workers
        return worker_concurrency(self.concurrency, workers), budget


def xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers this run starts (``-n N`` becomes N ``popen`` specs, and
    ``--tx 2*popen`` counts 2); 0 without xdist's distribution."""
    if config.getoption("dist", "no") == "no" or config.option.collectonly:
        return 0
    count = 0
    for spec in config.getoption("tx", None) or ():
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def check_concurrency_shares(config: pytest.Config, concurrency: int) -> None:
    """Refuse (a usage error, before any call) a concurrency the user set below the number of
    xdist workers: each worker needs a call in flight of its own, so the run would make one
    per worker at once, more than asked. The default (8) is not a limit anyone asked for:
    with more workers than that, each still makes one."""
    workers = xdist_workers(config)
    if workers > concurrency and raw(config, "agenteval_concurrency") is not None:
        raise pytest.UsageError(
            f"--agenteval-concurrency={concurrency} is below the run's {workers} xdist "
            f"workers: each makes at least one call at a time, so {workers} would be in "
            f"flight at once; run with -n {concurrency} (or fewer workers), or a concurrency "
            f"of at least {workers}"
        )


def worker_concurrency(concurrency: int, workers: int) -> int:
    """One of *workers* processes' share of the run's *concurrency* (at least 1 each)."""
    return max(1, concurrency // max(1, workers))

"""pytest hooks: thin, delegating to the role object in ``config.stash``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import hookspecs
from ._stash import STATE
from ._vocab import BENCHMARK_SUFFIXES

_GROUP = "agenteval"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _option(
    parser: pytest.Parser,
    group: Any,
    flag: str,
    *,
    help: str,
    ini_type: Any = "string",
    default: Any = None,
    **kwargs: Any,
) -> None:
    """Every CLI option is paired with an ini key of the same name."""
    dest = "agenteval_" + flag.lstrip("-").removeprefix("agenteval-").replace("-", "_")
    group.addoption(flag, dest=dest, default=default, help=help, **kwargs)
    parser.addini(dest, help=help, type=ini_type, default=None)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(_GROUP, "agent benchmarks (pytest-agenteval)")
    _option(
        parser,
        group,
        "--bench",
        action="append",
        metavar="FAMILY[,FAMILY]",
        help="run these benchmark families (bundled name, path of a folder with benchmark.yaml, "
        "or path of a folder of AgentEval article files)",
    )
    _option(
        parser,
        group,
        "--preset",
        metavar="NAME[+PACK]",
        help="preset of the family to run (default: smoke; compose packs with +)",
    )
    _option(
        parser,
        group,
        "--judge",
        action="append",
        metavar="SPEC",
        help="judge: rules | openai:MODEL | anthropic:MODEL; repeat for several "
        "(env AGENTEVAL_JUDGE; default: rules)",
    )
    _option(
        parser,
        group,
        "--judge-base-url",
        metavar="URL",
        help="base URL of an OpenAI-compatible judge server (vLLM, Ollama, llama.cpp, LM Studio); "
        "else OPENAI_BASE_URL / ANTHROPIC_BASE_URL",
    )
    _option(
        parser,
        group,
        "--judge-timeout",
        metavar="SECONDS",
        type=float,
        help="HTTP timeout of one judge request (default 60)",
    )
    _option(
        parser,
        group,
        "--judge-deadline",
        metavar="SECONDS",
        type=float,
        help="wall-clock deadline of one judge grade, retries included (default 120)",
    )
    _option(
        parser,
        group,
        "--judge-max-retries",
        metavar="N",
        type=int,
        help="retries the SDK makes on 408/409/429/5xx and connection errors (default 2)",
    )
    _option(
        parser,
        group,
        "--judge-cache",
        choices=("off", "read", "write", "readwrite"),
        help="content-addressed judge cache (default off)",
    )
    _option(
        parser,
        group,
        "--judge-cache-dir",
        metavar="DIR",
        help="where the judge cache lives (default <agenteval-out>/judge-cache)",
    )
    _option(
        parser,
        group,
        "--judge-repeat",
        choices=("no", "sampled"),
        help="a preset's judges: N with fewer --judge given: no (default: refused, "
        "pass N different judges) or sampled (repeat a judge, seed base+k at temperature 0.7)",
    )
    _option(
        parser,
        group,
        "--judge-batch",
        action="store_true",
        ini_type="bool",
        help="grade calibration entries through the provider's batch API (OpenAI Batch API, "
        "Anthropic Message Batches): half the price, answered within 24 h; a run stopped while "
        "its batch is pending resumes when the same command is run again",
    )
    _option(
        parser,
        group,
        "--judge-batch-poll",
        metavar="SECONDS",
        help="how often --judge-batch asks the provider whether its batch has ended (default 30)",
    )
    _option(
        parser,
        group,
        "--judge-batch-wait",
        metavar="SECONDS",
        help="how long --judge-batch waits for its batch before the run stops, resumable "
        "(default: until the batch ends; 0: submit and stop)",
    )
    _option(
        parser,
        group,
        "--agenteval-progress",
        choices=("auto", "line", "plain", "off"),
        help="progress of the run: a status line on the bottom row of a terminal (line), "
        "periodic lines (plain), auto (default: line on a terminal, else plain after 10 s) or off",
    )
    _option(
        parser,
        group,
        "--subject",
        metavar="SPEC",
        help="agent under test: module:callable (default: the agenteval_subject fixture)",
    )
    _option(
        parser,
        group,
        "--subject-base-url",
        metavar="URL",
        help="base URL for openai:/anthropic: subjects (else OPENAI_BASE_URL / ANTHROPIC_BASE_URL)",
    )
    _option(
        parser,
        group,
        "--subject-timeout",
        metavar="SECONDS",
        type=float,
        help="timeout for one subject call (openai:, anthropic:, cmd:; default 120)",
    )
    _option(
        parser,
        group,
        "--subject-env",
        action="append",
        metavar="NAME",
        ini_type="linelist",
        help="environment variable a cmd: subject may see besides PATH, HOME, locale and "
        "temp-dir ones (repeatable; NAME or a pattern such as MYAGENT_*)",
    )
    group.addoption(
        "--condition",
        action="append",
        dest="agenteval_condition",
        metavar="NAME[=FILE]",
        help="run every scenario under this condition: a name and an optional system-prompt "
        "file for the subject (repeatable; ini: agenteval_conditions)",
    )
    parser.addini(
        "agenteval_conditions",
        type="linelist",
        default=[],
        help="conditions, one 'NAME = [system-prompt file]' line each",
    )
    group.addoption(
        "--conditions",
        dest="agenteval_conditions_file",
        metavar="FILE",
        help="conditions from a YAML file: a name, a system prompt and MCP servers (stdio "
        "command or streamable-HTTP url) each (ini: agenteval_conditions_file)",
    )
    parser.addini(
        "agenteval_conditions_file",
        help="YAML file of conditions (name, system_prompt, mcp_servers), rootdir-relative",
    )
    _option(
        parser,
        group,
        "--mcp-max-steps",
        metavar="N",
        help="model calls an openai:/anthropic: subject may make per item when a condition "
        "offers MCP tools (default 8)",
    )
    _option(
        parser,
        group,
        "--samples",
        metavar="N",
        help="ask the subject N times per scenario (items id[s1] … id[sN]): each scenario "
        "reports the mean, standard deviation and a 95-percent interval; overrides the "
        "preset's samples (1 to 50)",
    )
    _option(
        parser,
        group,
        "--replay",
        metavar="FILE.jsonl",
        help="grade recorded answers instead of calling a subject: lines of "
        '{"scenario_id", "answer", "tool_calls"?, "condition"?, "sample"?}, or an earlier '
        "run's results.jsonl",
    )
    _option(
        parser,
        group,
        "--pairwise",
        metavar="A,B",
        help="compare two sides by preference instead of grading: each side a condition "
        "(--condition) or subject:SPEC; an LLM judge sees both answers in random order and "
        "prefers one or neither (items id[pairwise])",
    )
    _option(
        parser,
        group,
        "--pairwise-swap",
        metavar="SHARE",
        help="share of scenarios judged again with the order swapped, to measure position "
        "bias (default 0.25)",
    )
    _option(
        parser,
        group,
        "--pairwise-seed",
        metavar="N",
        help="seed of the order each pair is shown in (default: drawn per run and recorded)",
    )
    _option(
        parser,
        group,
        "--agenteval-out",
        metavar="DIR",
        help="output root for run directories (default: .agenteval)",
    )
    _option(
        parser,
        group,
        "--baseline",
        metavar="RUN_DIR|latest",
        help="compare with this earlier run (a run directory, an output folder holding runs/, "
        "or latest: the newest complete run of the same family, preset and subject under "
        "--agenteval-out); its evidence is verified first",
    )
    _option(
        parser,
        group,
        "--regression-max",
        metavar="X",
        help="largest significant score drop against the baseline the gate allows "
        "(default: the preset's gate regression_max, else 0)",
    )
    _option(
        parser,
        group,
        "--regression-alpha",
        metavar="P",
        help="significance level of the regression's one-sided sign test (default 0.05)",
    )
    _option(
        parser,
        group,
        "--agenteval-concurrency",
        metavar="N",
        type=int,
        help="subject and judge calls kept in flight for the whole run, divided across xdist "
        "workers (default: 8)",
    )
    _option(
        parser,
        group,
        "--agenteval-max-cost",
        metavar="USD",
        type=float,
        help="stop issuing subject and judge calls once this much is spent in the run (divided across "
        "xdist workers)",
    )
    parser.addini(
        "agenteval_rates",
        type="linelist",
        default=[],
        help="token prices: one 'model = input output' line per model, USD per 1M tokens",
    )
    _option(
        parser,
        group,
        "--calibration-split",
        choices=("holdout", "all"),
        help="split the calibration gate is computed on (default holdout; 'all' for data without a split)",
    )
    _option(
        parser,
        group,
        "--calibration-repeat",
        metavar="N",
        type=int,
        help="grade each golden entry N times and report test-retest agreement",
    )
    _option(
        parser,
        group,
        "--calibration-min-n",
        metavar="N",
        type=int,
        help="graded entries a pillar needs before its calibration gate can pass (default 10); "
        "fewer is 'insufficient data'",
    )
    _option(
        parser,
        group,
        "--calibration-gate-on",
        choices=("point", "lower"),
        help="gate kappa and accuracy on the point estimate (default) or on the lower bound "
        "of their 95-percent bootstrap interval",
    )
    group.addoption(
        "--bench-list",
        action="store_true",
        dest="agenteval_bench_list",
        default=False,
        help="list the bundled families, presets and controls, then exit",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "agenteval: a scenario of an agent benchmark")
    config.addinivalue_line("markers", "calibration: a golden-dataset entry graded by the judge")
    config.addinivalue_line(
        "markers", "replay: a scenario graded from a recorded answer (--replay)"
    )
    if not _run_requested(config):
        if config.getoption("agenteval_replay"):
            raise pytest.UsageError(
                "--replay grades a family's scenarios: name the family too "
                "(--bench=FAMILY or its folder)"
            )
        if config.getoption("agenteval_pairwise"):
            raise pytest.UsageError(
                "--pairwise compares two sides on a family's scenarios: name the family too "
                "(--bench=FAMILY or its folder)"
            )
        return  # a plain pytest run: nothing of ours is imported or registered
    from ._roles import register_roles
    from ._session import AgentevalState

    state = AgentevalState(config)
    config.stash[STATE] = state
    register_roles(config, state)
    from ._progress import ProgressPlugin

    if state.settings.judge_batch and not state.is_worker:
        from .judges._batch import check_options

        check_options(config)  # --judge-batch under -n: refused before collection
    config.pluginmanager.register(ProgressPlugin(state), "agenteval-progress")
    if state.settings.pairwise is not None:
        from ._pairwise_run import configure as configure_pairwise

        configure_pairwise(config, state)  # --pairwise=A,B: comparison items, its own run
    # pytest-html: score, verdict, gate, reasoning; only when it writes a report (--html)
    if config.pluginmanager.hasplugin("html") and getattr(config.option, "htmlpath", None):
        from .reports._pytest_html import register_html

        register_html(config, state)
    _sigterm_as_interrupt(config)
    if state.calibration_mode:  # a named path runs that path only
        roots = [] if state.named_paths() else state.golden_roots()
    else:
        roots = state.bench_roots
    if roots:
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            # a root named already (``--bench=fam a.py fam b.py``) is not added again: pytest
            # before 8.2 would collect its items twice; nor, before 8.2, one inside a named
            # folder (``--bench=fam .``), whose collection then dropped the folder's other
            # tests (8.2 and later merge the two: adding it keeps a root that norecursedirs
            # would skip)
            named = set(state.named_paths())
            config.args = [
                *config.args,
                *(str(r) for r in roots if r not in named and not _inside_for_old_pytest(r, named)),
            ]
        else:
            config.args = [str(r) for r in roots]


def _inside_for_old_pytest(root: Path, named: set[Path]) -> bool:
    """Before pytest 8.2: is *root* inside a named folder (which collects it anyway)?"""
    return pytest.version_tuple[:2] < (8, 2) and any(n in root.parents for n in named)


def _run_requested(config: pytest.Config) -> bool:
    """Does this command ask for a benchmark or calibration run? (cheap: no YAML read)

    Yes with ``--bench`` (or its ini key), with a ``-m`` expression naming
    ``calibration``, or when a command-line path is a YAML/JSONL file, a
    folder holding a ``benchmark.yaml``, or a folder of AgentEval article
    files (a 4 KB look at each of its YAML files). Anything else is a plain
    pytest run.
    """
    if config.getoption("agenteval_bench") or config.getini("agenteval_bench"):
        return True
    if "calibration" in str(config.getoption("markexpr", "") or ""):
        return True
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        path = base / str(arg).split("::", 1)[0]
        if path.suffix in BENCHMARK_SUFFIXES or (path / "benchmark.yaml").is_file():
            return True
        if config.args_source == pytest.Config.ArgsSource.ARGS and _agenteval_dir(path):
            return True
    return False


def _agenteval_dir(path: Path) -> bool:
    from ._compat import is_agenteval_dir  # standard library only: a plain run stays light

    return is_agenteval_dir(path)


def _sigterm_as_interrupt(config: pytest.Config) -> None:
    """Treat SIGTERM like Ctrl-C so an interrupted run still seals its evidence as incomplete."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, handler)
    config.add_cleanup(restore)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("agenteval_bench_list"):
        from ._listing import print_listing

        print_listing()
        return 0
    return None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = _state(config)
    if state is None:
        return None
    notes = _family_notes(state, config)
    if state.calibration_mode:  # golden entries graded by the judge: no subject, no preset
        fams = (
            ", ".join(_family_name(state, p) for p in state.bench_roots) or "from the golden files"
        )
        return [
            f"agenteval: calibration of judge {state.judge_label()} · families {fams}",
            *state.budget_notes(),
            *notes,
        ]
    if not state.bench_roots:  # families named by path, or none: the budget's warnings hold
        return [*state.budget_notes(), *notes] or None
    fams = ", ".join(_family_name(state, p) for p in state.bench_roots)
    return [
        f"agenteval: bench {fams} · preset {state.preset or 'smoke (default)'}",
        f"agenteval: judge {state.judge_label()}",
        f"agenteval: subject {state.subject_header()}",
        *state.budget_notes(),
        *state.replay_notes(),
        *notes,
    ]


def _family_notes(state: Any, config: pytest.Config) -> list[str]:
    """What loading assumed for AgentEval folders run without a benchmark.yaml."""
    base = Path(config.invocation_params.dir)
    named = [base / str(a).split("::", 1)[0] for a in config.args]
    lines: list[str] = []
    for path in dict.fromkeys([*state.bench_roots, *named]):
        if not _agenteval_dir(path):
            continue
        try:
            family = state.family(path)
        except Exception:  # a broken family is reported at collection, with file and line
            continue
        lines += [f"agenteval: note: {note}" for note in family.notes]
    return lines


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    state = _state(parent.config)
    if state is None:
        return None
    if not (path / "benchmark.yaml").is_file() and not (
        # a folder of AgentEval articles runs as a family when it is named (args or --bench)
        parent.session.isinitpath(path) and _agenteval_dir(path)
    ):
        return None
    from ._collect import FamilyDir

    if not state.is_selected_family(path, parent.session):
        return None
    nodeid = None
    try:
        nodeid = path.resolve().relative_to(parent.config.rootpath).as_posix()
    except ValueError:
        nodeid = path.name
    return FamilyDir.from_parent(parent, path=path, nodeid=nodeid)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in BENCHMARK_SUFFIXES or _state(parent.config) is None:
        return None
    if file_path.suffix == ".jsonl":
        return _golden_file(file_path, parent)
    if not parent.session.isinitpath(file_path):
        return None
    from ._collect import SingleArticleFile
    from ._family import BENCHMARK_FILE, is_family_dir

    if file_path.name == BENCHMARK_FILE or is_family_dir(file_path.parent):
        return None
    base = parent.nodeid.strip(".")
    nodeid = f"{base}/{file_path.name}" if base else file_path.name
    return SingleArticleFile.from_parent(
        parent,
        name=file_path.name,
        path=file_path,
        nodeid=nodeid,
        family=None,
        plan=None,
        article=None,
        error=None,
    )


def _golden_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    from ._golden_items import GoldenCollector

    state = _state(parent.config)
    resolved = file_path.resolve()
    wanted = parent.session.isinitpath(file_path) or (
        state.calibration_mode and state.golden_selected(file_path)
    )
    if not wanted:
        return None
    try:
        nodeid = resolved.relative_to(parent.config.rootpath).as_posix()
    except ValueError:
        nodeid = f"golden/{file_path.parent.name}/{file_path.name}"
    return GoldenCollector.from_parent(parent, name=file_path.name, path=file_path, nodeid=nodeid)


def _family_name(state: Any, root: Path) -> str:
    try:
        return str(state.family(root).name)
    except Exception:  # a broken family is reported at collection, with file and line
        return root.name


def _state(config: pytest.Config) -> Any:
    return config.stash.get(STATE, None)


@pytest.hookimpl(trylast=True)
def pytest_agenteval_make_judge(config: pytest.Config, spec: str) -> Any | None:
    if spec.strip().lower() == "rules":
        from .judges._base import RulesJudge

        return RulesJudge()
    if spec.split(":", 1)[0] in {"openai", "anthropic"}:
        from .judges._llm import JudgeConfigError, make_llm_judge

        try:
            return make_llm_judge(spec, _judge_settings(config))
        except JudgeConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    return None


def run_settings(config: pytest.Config) -> Any:
    """The run's :class:`~pytest_agenteval._settings.RunSettings` (read once, at configure)."""
    state = _state(config)
    if state is not None:
        return state.settings
    from ._settings import RunSettings

    return RunSettings.from_config(config)


def _judge_settings(config: pytest.Config) -> Any:
    from .judges._llm import JudgeSettings

    run = run_settings(config)
    return JudgeSettings(
        base_url=run.judge_base_url,
        timeout_s=run.judge_timeout_s,
        deadline_s=run.judge_deadline_s,
        max_retries=run.judge_max_retries,
        cache_dir=run.judge_cache_dir,
        cache_mode=run.judge_cache,
        repeat=run.judge_repeat,
    )


@pytest.hookimpl(trylast=True)
def pytest_agenteval_make_subject(config: pytest.Config, spec: str) -> Any | None:
    kind = spec.split(":", 1)[0]
    if kind in {"openai", "anthropic", "cmd"}:
        from .subjects._hosted import SubjectConfigError, make_subject

        run = run_settings(config)
        try:
            return make_subject(
                spec,
                base_url=run.subject_base_url,
                timeout_s=run.subject_timeout_s,
                pass_env=list(run.subject_env),
            )
        except (SubjectConfigError, ValueError) as exc:
            raise pytest.UsageError(f"--subject {kind}:…: {exc}") from None
    if ":" in spec:
        from .subjects._base import load_callable

        try:
            return load_callable(spec, Path(config.invocation_params.dir), config.rootpath)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    return None

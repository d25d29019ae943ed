"""Conditions: named contexts the subject runs under, compared in one run (k-eval).

A condition is a name, an optional system prompt and zero or more MCP servers
whose tools are offered to the subject. With conditions configured, every
scenario runs once per condition (× samples); each condition gets its own
tree, gate and run directory, so ``baseline`` and ``with-tools`` can be
compared on the same scenarios. Without conditions nothing changes.

Declared in a YAML file (``--conditions=FILE``, ini ``agenteval_conditions_file``)::

    conditions:
      - name: baseline
      - name: with-policy-server
        system_prompt: Use the policy tools before you answer.   # or system_prompt_file
        mcp_servers:
          - name: policies                        # a local server over stdio
            command: python
            args: [servers/policy_server.py]
            env: {POLICY_DB: "${POLICY_DB}"}      # ${NAME}: from pytest's environment
          - name: search                          # a server over streamable HTTP
            url: http://127.0.0.1:8765/mcp
            headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}

or as ini lines ``agenteval_conditions = NAME = [FILE]`` / on the command line
``--condition=NAME[=FILE]`` (a name and a system-prompt file; paths relative
to the rootdir). Both kinds may be given; names must differ.

Paths in the file (``system_prompt_file``, ``cwd``, a ``command`` or ``args``
are passed as written) are relative to the file's folder, which is also the
servers' working directory unless ``cwd`` says otherwise. ``${NAME}`` is
expanded in ``env`` and ``headers`` values only: those are never recorded
(the manifest keeps their names), so a token never reaches the evidence.

The file is validated strictly (unknown keys, wrong types, a server that is
neither ``command`` nor ``url``, duplicate names, an unset ``${NAME}``): each
problem is a :class:`~pytest_agenteval._yaml.SpecError` naming ``file:line``,
before any call. The comparison of conditions at the end of a run is
:func:`compare_conditions` (pure; see its docstring for the statistics).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeAlias
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from ._vocab import ConfigError, JSONObject, JSONValue, SpecError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ._evals import EvalResult
    from ._mcp import Toolbox

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRETISH = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL)", re.I)
#: Seconds a server has to start, answer ``initialize`` and list its tools (default).
DEFAULT_STARTUP_TIMEOUT = 30.0
#: Largest system prompt a conditions file may name or hold.
MAX_PROMPT_BYTES = 256 * 1024


#: What tells two MCP servers apart (:attr:`McpServerSpec.key`).
ServerKey: TypeAlias = tuple[
    str,  # name
    str | None,  # command
    tuple[str, ...],  # args
    tuple[tuple[str, str], ...],  # env
    str | None,  # cwd
    str | None,  # url
    tuple[tuple[str, str], ...],  # headers
]


class ConditionError(ConfigError, ValueError):
    """A bad ``--condition``/``--conditions`` value: a usage error."""


# --------------------------------------------------------------------------- the file's models

Name = Annotated[StrictStr, Field(pattern=_NAME.pattern)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class McpServerModel(_Strict):
    """``{name, command, args, env, cwd}`` (stdio) or ``{name, url, headers}`` (streamable HTTP)."""

    name: Name
    command: StrictStr | None = None
    args: list[StrictStr] = []
    env: dict[StrictStr, StrictStr] = {}
    cwd: StrictStr | None = None
    url: StrictStr | None = None
    headers: dict[StrictStr, StrictStr] = {}
    startup_timeout: Annotated[float, Field(gt=0, le=600)] | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerModel:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (a stdio server) or 'url' (streamable HTTP)")
        if self.command is not None:
            if not self.command.strip():
                raise ValueError("'command' is empty")
            if self.headers:
                raise ValueError("'headers' belong to a 'url' server, not a 'command'")
        else:
            stray = [k for k in ("args", "env", "cwd") if getattr(self, k)]
            if stray:
                raise ValueError(f"{', '.join(map(repr, stray))} belong to a 'command' server")
            scheme = urlsplit(str(self.url)).scheme.lower()
            if scheme not in ("http", "https"):
                raise ValueError("'url' must be an http:// or https:// URL")
        return self


class ConditionModel(_Strict):
    name: Name
    system_prompt: StrictStr | None = None
    system_prompt_file: StrictStr | None = None
    mcp_servers: list[McpServerModel] = []

    @model_validator(mode="after")
    def _checks(self) -> ConditionModel:
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise ValueError("give 'system_prompt' or 'system_prompt_file', not both")
        names = [s.name for s in self.mcp_servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"MCP server {twice[0]!r} is declared twice in this condition")
        return self


class ConditionsFile(_Strict):
    conditions: Annotated[list[ConditionModel], Field(min_length=1)]


# --------------------------------------------------------------------------- runtime objects


@dataclass(frozen=True)
class McpServerSpec:
    """One MCP server as the plugin starts it (``${NAME}`` already expanded).

    ``env`` and ``headers`` hold values that may be secrets: :meth:`describe`
    records their names only.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    where: str = ""  # file:line, for error messages

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable-http"

    @property
    def key(self) -> ServerKey:
        """Two conditions naming the same server (same everything) share one process."""
        return (
            self.name,
            self.command,
            self.args,
            self.env,
            self.cwd,
            self.url,
            self.headers,
        )

    def describe(self, reported: Mapping[str, JSONValue] | None = None) -> JSONObject:
        """What the manifest records: never an env or header value, never URL userinfo."""
        from .evidence._redact import endpoint

        out: JSONObject = {"name": self.name, "transport": self.transport}
        if self.command is not None:
            out["command"] = self.command
            out["args"] = [*mask_args(self.args)]
            out["env"] = [k for k, _ in sorted(self.env)]  # names only
        else:
            out["url"] = endpoint(str(self.url))  # no userinfo, query or fragment
            out["headers"] = [k for k, _ in sorted(self.headers)]  # names only
        reported = reported or {}
        out["server"] = reported.get("server")  # name/version from the initialize result
        out["protocol_version"] = reported.get("protocol_version")
        out["tools"] = reported.get("tools")
        return out


def mask_args(args: Iterable[str]) -> list[str]:
    """*args* with the value of anything that looks like a credential masked.

    ``--api-key=abc`` and ``TOKEN=abc`` become ``--api-key=***`` / ``TOKEN=***``;
    the argument after a bare ``--token`` flag becomes ``***``.
    """
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        if eq and _SECRETISH.search(name):
            out.append(f"{name}=***")
        elif arg.startswith("-") and _SECRETISH.search(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(arg)
    return out


@dataclass(frozen=True)
class Condition:
    name: str
    system: str | None = None
    file: str | None = None
    mcp_servers: tuple[McpServerSpec, ...] = ()
    #: The live tools of this condition's servers in this process (set once they started).
    toolbox: Toolbox | None = field(default=None, compare=False, repr=False)

    def attach(self, toolbox: Toolbox | None) -> None:
        """Give the condition its servers' tools once they are running (per process)."""
        object.__setattr__(self, "toolbox", toolbox)

    def describe(self, reported: Mapping[str, Mapping[str, JSONValue]] | None = None) -> JSONObject:
        """What the manifest records (the prompt's hash, not its text).

        *reported*: server name -> what the running server said of itself
        (name, version, protocol, tools), learned from the items' records.
        """
        reported = reported or {}
        return {
            "name": self.name,
            "system_prompt_file": self.file,
            "system_prompt_sha256": None
            if self.system is None
            else hashlib.sha256(self.system.encode("utf-8")).hexdigest(),
            "mcp_servers": [s.describe(reported.get(s.name)) for s in self.mcp_servers],
        }

    def system_for(self, scenario_system: str | None) -> str | None:
        """The condition's system prompt first, then the scenario's own, if any."""
        parts = [p for p in (self.system, scenario_system) if p]
        return "\n\n".join(parts) if parts else None


def parse_conditions(specs: Iterable[str], base: Path) -> list[Condition]:
    """``NAME`` or ``NAME=FILE`` (or the ini's ``NAME = FILE``) → conditions, in order."""
    found: dict[str, Condition] = {}
    for raw in specs:
        spec = raw.split("#", 1)[0].strip()
        if not spec:
            continue
        name, _, file = (part.strip() for part in spec.partition("="))
        if not _NAME.match(name):
            raise ConditionError(
                f"condition name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)"
            )
        if name in found:
            raise ConditionError(f"condition {name!r} is declared twice")
        system = None
        if file:
            path = Path(file) if Path(file).is_absolute() else base / file
            try:
                system = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConditionError(
                    f"condition {name!r}: cannot read system prompt {file!r} ({exc.strerror or exc})"
                ) from None
        found[name] = Condition(name, system, file or None)
    return list(found.values())


def load_conditions_file(path: Path, environ: Mapping[str, str] | None = None) -> list[Condition]:
    """The conditions of a YAML file, validated; problems are ``SpecError``\\ s with file:line."""
    from ._family import validate
    from ._yaml import LineDict, LineList, load_yaml, read_limited

    environ = os.environ if environ is None else environ
    data = load_yaml(path)
    spec = validate(ConditionsFile, data, path)
    folder = path.resolve().parent
    items = data["conditions"] if isinstance(data, LineDict) else LineList()

    def line(node: object, key: str | None = None) -> int | None:
        if isinstance(node, LineDict):
            return node.key_lines.get(key, node.line) if key else node.line or None
        return None

    out: list[Condition] = []
    seen: dict[str, int | None] = {}
    for i, cond in enumerate(spec.conditions):
        node = items[i] if i < len(items) else None
        where = line(node)
        if cond.name in seen:
            raise SpecError(
                path,
                where,
                f"condition {cond.name!r} is declared twice (first on line {seen[cond.name]})",
            )
        seen[cond.name] = where
        system = cond.system_prompt
        file = None
        if cond.system_prompt_file is not None:
            file = cond.system_prompt_file
            where_file = line(node, "system_prompt_file")
            try:
                system = read_limited(folder / file, MAX_PROMPT_BYTES).decode("utf-8")
            except SpecError as exc:
                raise SpecError(
                    path, where_file, f"system_prompt_file {file}: {exc.message}"
                ) from None
            except UnicodeDecodeError:
                raise SpecError(
                    path, where_file, f"system_prompt_file {file}: not UTF-8 text"
                ) from None
        servers = []
        server_nodes = node.get("mcp_servers") if isinstance(node, LineDict) else None
        for j, server in enumerate(cond.mcp_servers):
            snode = (
                server_nodes[j]
                if isinstance(server_nodes, LineList) and j < len(server_nodes)
                else None
            )

            def expand(
                values: Mapping[str, str],
                key: str,
                snode: object = snode,
                server: McpServerModel = server,
            ) -> tuple[tuple[str, str], ...]:
                done = []
                for name, value in values.items():
                    missing = [v for v in _VAR.findall(value) if v not in environ]
                    if missing:
                        vnode = snode.get(key) if isinstance(snode, LineDict) else None
                        raise SpecError(
                            path,
                            line(vnode, name) or line(snode, key),
                            f"MCP server {server.name!r}: {key}.{name} names ${{{missing[0]}}}, "
                            "which is not set in the environment",
                        )
                    done.append((name, _VAR.sub(lambda m: environ[m.group(1)], value)))
                return tuple(done)

            cwd = str(folder / server.cwd) if server.cwd else str(folder)
            command = server.command
            if command is not None and ("/" in command or "\\" in command):
                command = str(folder / command)  # a path: relative to the file, not to pytest
            servers.append(
                McpServerSpec(
                    name=server.name,
                    command=command,
                    args=tuple(server.args),
                    env=expand(server.env, "env"),
                    cwd=cwd if server.command is not None else None,
                    url=server.url,
                    headers=expand(server.headers, "headers"),
                    startup_timeout=server.startup_timeout or DEFAULT_STARTUP_TIMEOUT,
                    where=f"{path}:{line(snode) or line(node) or '?'}",
                )
            )
        out.append(Condition(cond.name, system, file, tuple(servers)))
    return out


def merge_conditions(first: Sequence[Condition], second: Sequence[Condition]) -> list[Condition]:
    """The file's conditions, then the command line's; a name given twice is an error."""
    out: dict[str, Condition] = {}
    for cond in (*first, *second):
        if cond.name in out:
            raise ConditionError(
                f"condition {cond.name!r} is declared twice (--conditions file and --condition)"
            )
        out[cond.name] = cond
    return list(out.values())


# --------------------------------------------------------------------------- comparison

#: Resamples of the bootstrap intervals; the seed makes a run's figures reproducible.
RESAMPLES = 2000
SEED = 20261
CONFIDENCE = 0.95
#: The level at which a difference is called ``significant`` (two-sided sign test).
ALPHA = 0.05


@dataclass(frozen=True)
class ConditionScores:
    """One condition's results for the comparison.

    *score*: the tree's root score; *pillars*: each pillar's tree score;
    *scenarios*: scenario id -> (pillar, the graded sample scores; one for a
    run without samples, none when the scenario errored).
    """

    name: str
    score: float | None
    pillars: Mapping[str, float | None]
    scenarios: Mapping[str, tuple[str, tuple[float, ...]]]


def sign_test_two_sided(better: int, worse: int) -> float:
    """Exact two-sided sign test: 2·P(X ≤ min(better, worse)), X ~ Binomial(n, ½), capped at 1."""
    if better < 0 or worse < 0:
        raise ValueError("counts must be non-negative")
    n = better + worse
    if n == 0:
        return 1.0
    k = min(better, worse)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / (1 << n)
    return min(1.0, 2 * tail)


def _boot_means(
    samples: Sequence[Sequence[float]], resamples: int, rng: np.random.Generator
) -> NDArray[np.float64]:  # n scenarios × resamples
    """For each scenario, *resamples* bootstrap means of its samples (itself when it has one)."""
    import numpy as np

    rows = []
    for values in samples:
        arr = np.asarray(values, dtype=float)
        if len(arr) == 1:
            rows.append(np.full(resamples, arr[0]))
        else:
            picks = rng.integers(0, len(arr), size=(resamples, len(arr)))
            rows.append(arr[picks].mean(axis=1))
    return np.vstack(rows) if rows else np.zeros((0, resamples))


def _interval(
    per_scenario: NDArray[np.float64], resamples: int, rng: np.random.Generator, confidence: float
) -> list[JSONValue]:
    """Percentile interval of the mean over scenarios: scenarios resampled with replacement,
    each drawn scenario contributing its (already resampled) sample mean."""
    import numpy as np

    n = per_scenario.shape[0]
    picks = rng.integers(0, n, size=(resamples, n))
    cols = np.arange(resamples)[:, None]
    means = per_scenario[picks, cols].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return [_r(float(lo)), _r(float(hi))]


def _r(value: float) -> float:
    return round(value, 4)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def compare_conditions(
    conditions: Sequence[ConditionScores],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> JSONObject:
    """Each condition per pillar (and overall) against the FIRST condition.

    For each group (``overall``, then each pillar in order of appearance):

    - ``score``: the condition's tree score (the official aggregate: weights,
      ``min``, caps as the family says);
    - ``mean`` and ``ci``: the unweighted mean of its graded scenario scores
      (a scenario's score: the mean of its samples) and a percentile bootstrap
      interval at *confidence*: scenarios resampled with replacement and, when
      a scenario has several samples, its samples resampled within it (a
      two-stage bootstrap, so the interval carries the sampling noise too);
    - ``difference`` (every condition but the first): over the scenarios graded
      under both, the per-scenario differences ``this − first``: their mean,
      a paired bootstrap interval (the same two stages, the pairs kept
      together), how many scenarios are ``better``/``worse``/``ties``, and the
      exact two-sided sign test's ``p_value`` on better against worse (ties
      dropped), and ``significant`` when it is below :data:`ALPHA`. The sign test assumes nothing of the scores' distribution —
      bounded, often 0/0.5/1, with many ties — and is exact for any number of
      scenarios; the interval gives the size of the effect.

    Deterministic: the bootstrap uses a fixed *seed*.
    """
    import numpy as np

    if not conditions:
        return {}
    first = conditions[0]
    pillars: list[str] = []
    for cond in conditions:
        for key in [*cond.pillars, *(p for p, _ in cond.scenarios.values())]:
            if key not in pillars:
                pillars.append(key)
    groups: list[JSONValue] = []
    group_keys: list[str | None] = [None, *pillars]
    for pillar in group_keys:
        rows: list[JSONValue] = []
        for index, cond in enumerate(conditions):
            rng = np.random.default_rng([seed, index, len(groups)])
            graded = {
                sid: values
                for sid, (p, values) in cond.scenarios.items()
                if values and (pillar is None or p == pillar)
            }
            row: JSONObject = {
                "condition": cond.name,
                "score": _score(cond.score if pillar is None else cond.pillars.get(pillar)),
                "scenarios": len(graded),
                "mean": None,
                "ci": None,
            }
            if graded:
                row["mean"] = _r(_mean([_mean(v) for v in graded.values()]))
                boot = _boot_means(list(graded.values()), resamples, rng)
                row["ci"] = _interval(boot, resamples, rng, confidence)
            if index > 0:
                row["difference"] = _difference(first, cond, pillar, resamples, rng, confidence)
            rows.append(row)
        groups.append({"pillar": pillar if pillar is not None else "overall", "conditions": rows})
    return {
        "reference": first.name,
        "method": {
            "mean": "unweighted mean of the graded scenario scores (a scenario: mean of its samples)",
            "interval": f"{confidence:.0%} percentile bootstrap over scenarios (and samples within "
            f"each), {resamples} resamples, seed {seed}",
            "difference": "paired over the scenarios graded under both conditions: mean of the "
            "per-scenario differences, paired bootstrap interval",
            "test": "exact two-sided sign test on the per-scenario differences (ties dropped)",
            "alpha": ALPHA,
            "confidence": confidence,
            "resamples": resamples,
            "seed": seed,
        },
        "groups": groups,
    }


def _score(value: float | None) -> float | None:
    return None if value is None else _r(value)


def _difference(
    first: ConditionScores,
    cond: ConditionScores,
    pillar: str | None,
    resamples: int,
    rng: np.random.Generator,
    confidence: float,
) -> JSONObject:
    pairs = []
    for sid, (p, values) in cond.scenarios.items():
        if pillar is not None and p != pillar:
            continue
        ref = first.scenarios.get(sid)
        if values and ref is not None and ref[1]:
            pairs.append((ref[1], values))
    if not pairs:
        return {
            "paired_scenarios": 0,
            "mean": None,
            "ci": None,
            "better": 0,
            "worse": 0,
            "ties": 0,
            "p_value": None,
            "significant": False,
        }
    diffs = [_mean(b) - _mean(a) for a, b in pairs]
    tol = 1e-9
    better = sum(1 for d in diffs if d > tol)
    worse = sum(1 for d in diffs if d < -tol)
    boot_a = _boot_means([a for a, _ in pairs], resamples, rng)
    boot_b = _boot_means([b for _, b in pairs], resamples, rng)
    p_value = sign_test_two_sided(better, worse)
    return {
        "paired_scenarios": len(pairs),
        "mean": _r(_mean(diffs)),
        "ci": _interval(boot_b - boot_a, resamples, rng, confidence),
        "better": better,
        "worse": worse,
        "ties": len(diffs) - better - worse,
        "p_value": round(p_value, 6),
        "significant": p_value < ALPHA,
    }


def scores_of(name: str, tree: EvalResult | None) -> ConditionScores:
    """A condition's :class:`ConditionScores` from its result tree (benchmark ▸ pillar ▸ …)."""
    pillars: dict[str, float | None] = {}
    scenarios: dict[str, tuple[str, tuple[float, ...]]] = {}

    def walk(node: EvalResult, pillar: str | None) -> None:
        if node.kind == "pillar":
            pillar = node.key
            pillars[node.key] = node.score
        if node.kind == "scenario":
            samples = [c for c in node.children if c.kind == "sample"]
            if samples:
                values = tuple(float(s.score) for s in samples if s.score is not None and s.graded)
            else:
                values = () if node.score is None or not node.graded else (float(node.score),)
            scenarios[node.key] = (pillar or "?", values)
            return
        for child in node.children:
            walk(child, pillar)

    if tree is not None:
        walk(tree, None)
    return ConditionScores(name, None if tree is None else tree.score, pillars, scenarios)

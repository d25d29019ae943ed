"""Conditions: the ``--conditions`` file (strict, file:line errors), what the manifest keeps
of it, and the comparison of conditions (per pillar, paired, with hand-computed numbers)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_agenteval._conditions import (
    ConditionError,
    ConditionScores,
    compare_conditions,
    load_conditions_file,
    mask_args,
    merge_conditions,
    parse_conditions,
    sign_test_two_sided,
)
from pytest_agenteval._vocab import SpecError
from pytest_agenteval.reports._terminal import comparison_lines

FULL = """\
conditions:
  - name: baseline
  - name: with-policy
    system_prompt_file: prompts/policy.md
  - name: with-tools
    system_prompt: Use the tools.
    mcp_servers:
      - name: local
        command: ./bin/server
        args: [--db, data.sqlite, --api-key=abc123]
        env: {DB_TOKEN: "tok-${SECRET_FOR_TEST}", MODE: plain}
        cwd: servers
        startup_timeout: 5
      - name: remote
        url: https://user:pw@tools.example.com:8443/mcp/?token=abc#x
        headers: {Authorization: "Bearer ${SECRET_FOR_TEST}"}
"""


def write(tmp_path: Path, text: str, name: str = "conds.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- the file


def test_a_full_conditions_file(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "policy.md").write_text("Follow the policy.")
    path = write(tmp_path, FULL)
    baseline, policy, tools = load_conditions_file(path, {"SECRET_FOR_TEST": "hunter2-secret"})
    assert (baseline.name, baseline.system, baseline.mcp_servers) == ("baseline", None, ())
    assert (policy.system, policy.file) == ("Follow the policy.", "prompts/policy.md")
    assert tools.system == "Use the tools."
    local, remote = tools.mcp_servers
    folder = tmp_path.resolve()
    assert local.command == str(folder / "bin" / "server")  # a path: relative to the file
    assert local.args == ("--db", "data.sqlite", "--api-key=abc123")
    assert dict(local.env) == {"DB_TOKEN": "tok-hunter2-secret", "MODE": "plain"}
    assert local.cwd == str(folder / "servers")
    assert local.startup_timeout == 5 and local.where == f"{path}:8"
    assert local.transport == "stdio"
    assert remote.transport == "streamable-http" and remote.cwd is None
    assert dict(remote.headers) == {"Authorization": "Bearer hunter2-secret"}
    assert remote.startup_timeout == 30 and remote.where == f"{path}:14"


def test_the_manifest_keeps_names_never_values(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "policy.md").write_text("Follow the policy.")
    *_, tools = load_conditions_file(write(tmp_path, FULL), {"SECRET_FOR_TEST": "hunter2-secret"})
    described = tools.describe(
        {"local": {"server": {"name": "db", "version": "2.0"}, "tools": ["q"]}}
    )
    text = json.dumps(described)
    for secret in ("hunter2-secret", "abc123", "user:pw", "token=abc"):
        assert secret not in text
    servers = described["mcp_servers"]
    assert isinstance(servers, list)
    local, remote = servers
    assert local == {
        "name": "local",
        "transport": "stdio",
        "command": str(tmp_path.resolve() / "bin" / "server"),
        "args": ["--db", "data.sqlite", "--api-key=***"],
        "env": ["DB_TOKEN", "MODE"],
        "server": {"name": "db", "version": "2.0"},
        "protocol_version": None,
        "tools": ["q"],
    }
    assert isinstance(remote, dict)
    assert remote["url"] == "https://tools.example.com:8443/mcp"
    assert remote["headers"] == ["Authorization"] and remote["server"] is None
    assert described["system_prompt_sha256"] == hashlib.sha256(b"Use the tools.").hexdigest()


def test_mask_args() -> None:
    assert mask_args(["--token", "abc", "--port", "8", "PASSWORD=x", "--auth-header=y", "z"]) == [
        "--token",
        "***",
        "--port",
        "8",
        "PASSWORD=***",
        "--auth-header=***",
        "z",
    ]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "conditions:\n  - name: a\n    mcp_server: []\n",
            3,
            "conditions.0.mcp_server: unknown key 'mcp_server'",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n        command: x\n"
            "        url: http://h/mcp\n",
            4,
            "give either 'command' (a stdio server) or 'url' (streamable HTTP)",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n",
            4,
            "give either 'command'",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - {name: s, url: 'ftp://h/x'}\n",
            4,
            "'url' must be an http:// or https:// URL",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n        command: x\n"
            "        headers: {A: b}\n",
            4,
            "'headers' belong to a 'url' server",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n        command: x\n"
            "        args: [1, 2]\n",
            6,
            "args.0: Input should be a valid string (got 1)",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n        command: x\n"
            "        startup_timeout: 0\n",
            6,
            "startup_timeout: Input should be greater than 0",
        ),
        (
            "conditions:\n  - name: a\n  - name: b\n  - name: a\n",
            4,
            "condition 'a' is declared twice",
        ),
        (
            "conditions:\n  - name: a\n    mcp_servers:\n      - {name: s, command: x}\n"
            "      - {name: s, url: 'http://h'}\n",
            2,
            "MCP server 's' is declared twice in this condition",
        ),
        ("conditions: []\n", 1, "conditions: List should have at least 1 item"),
        ("conditions:\n  - name: ../x\n", 2, "conditions.0.name: String should match pattern"),
        (
            "conditions:\n  - name: a\n    system_prompt: x\n    system_prompt_file: y\n",
            2,
            "give 'system_prompt' or 'system_prompt_file', not both",
        ),
        ("conditions: !!python/object/apply:os.system ['true']\n", 1, "tag not allowed"),
    ],
)
def test_bad_files_name_the_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_conditions_file(path, {})
    assert info.value.line == line, str(info.value)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_an_unset_variable_names_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "conditions:\n  - name: a\n    mcp_servers:\n      - name: s\n        command: x\n"
        "        env:\n          OK: plain\n          TOKEN: ${NOT_SET_ANYWHERE}\n",
    )
    with pytest.raises(
        SpecError, match=r"conds.yaml:8: MCP server 's': env.TOKEN names \$\{NOT_SET_ANYWHERE\}"
    ):
        load_conditions_file(path, {})


def test_a_missing_prompt_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "conditions:\n  - name: a\n    system_prompt_file: nope.md\n")
    with pytest.raises(SpecError, match=r"conds\.yaml:3: system_prompt_file nope\.md: cannot read"):
        load_conditions_file(path, {})


def test_file_and_command_line_conditions_merge() -> None:
    first = parse_conditions(["a", "b"], Path("."))
    assert [c.name for c in merge_conditions(first, parse_conditions(["c"], Path(".")))] == [
        "a",
        "b",
        "c",
    ]
    with pytest.raises(ConditionError, match="condition 'b' is declared twice"):
        merge_conditions(first, parse_conditions(["b"], Path(".")))


# --------------------------------------------------------------------------- the statistics


@pytest.mark.parametrize(
    ("better", "worse", "p"),
    [
        (0, 0, 1.0),
        (3, 0, 0.25),  # 2 · (1/8)
        (0, 3, 0.25),
        (5, 1, 0.21875),  # 2 · (1 + 6)/64
        (2, 2, 1.0),  # 2 · 11/16, capped
        (10, 0, 0.001953125),  # 2 / 1024
    ],
)
def test_sign_test(better: int, worse: int, p: float) -> None:
    assert sign_test_two_sided(better, worse) == pytest.approx(p)


def scores(name: str, values: dict[str, tuple[str, tuple[float, ...]]]) -> ConditionScores:
    pillars = {p: None for p, _ in values.values()}
    return ConditionScores(name, None, pillars, values)


def group(result: Mapping[str, Any], pillar: str) -> list[dict[str, Any]]:
    return next(g["conditions"] for g in result["groups"] if g["pillar"] == pillar)


def pillars(result: Mapping[str, Any]) -> list[str]:
    return [g["pillar"] for g in result["groups"]]


def test_comparison_by_hand() -> None:
    a = scores(
        "a",
        {
            "s1": ("p", (0.0,)),
            "s2": ("p", (0.0,)),
            "s3": ("q", (1.0,)),
            "s4": ("q", (0.5,)),
            "s5": ("q", ()),  # errored under a: not in a's mean, not paired
        },
    )
    b = scores(
        "b",
        {
            "s1": ("p", (1.0,)),
            "s2": ("p", (1.0,)),
            "s3": ("q", (1.0,)),
            "s4": ("q", (0.5,)),
            "s5": ("q", (1.0,)),
        },
    )
    result = compare_conditions([a, b])
    assert result["reference"] == "a"
    assert pillars(result) == ["overall", "p", "q"]
    ref, other = group(result, "overall")
    assert (ref["mean"], ref["scenarios"], "difference" in ref) == (0.375, 4, False)
    assert (other["mean"], other["scenarios"]) == (0.9, 5)
    diff = other["difference"]
    # pairs s1..s4: differences 1, 1, 0, 0 -> 2 better, 2 tied, p = 2 · P(X <= 0 | n=2) = 0.5
    assert {k: diff[k] for k in ("paired_scenarios", "mean", "better", "worse", "ties")} == {
        "paired_scenarios": 4,
        "mean": 0.5,
        "better": 2,
        "worse": 0,
        "ties": 2,
    }
    assert diff["p_value"] == 0.5
    lo, hi = diff["ci"]
    assert 0 <= lo <= 0.5 <= hi <= 1  # resampled means of (1, 1, 0, 0) lie in [0, 1]
    p_ref, p_other = group(result, "p")
    # every pair in p differs by exactly 1: the paired interval has no width
    assert p_other["difference"]["ci"] == [1.0, 1.0]
    assert (p_ref["ci"], p_other["ci"]) == ([0.0, 0.0], [1.0, 1.0])
    assert p_other["difference"]["p_value"] == 0.5  # 2 better of 2: 2 · 1/4
    q_other = group(result, "q")[1]["difference"]
    assert (q_other["paired_scenarios"], q_other["ties"], q_other["p_value"]) == (2, 2, 1.0)
    assert q_other["ci"] == [0.0, 0.0]


def test_two_values_give_the_whole_range() -> None:
    """Means of (0, 1) resampled: 0, 0.5, 1 with chances 1/4, 1/2, 1/4; the 2.5 % and
    97.5 % points are 0 and 1."""
    result = compare_conditions([scores("a", {"s1": ("p", (0.0,)), "s2": ("p", (1.0,))})])
    (row,) = group(result, "overall")
    assert (row["mean"], row["ci"]) == (0.5, [0.0, 1.0])


def test_samples_are_resampled_within_a_scenario() -> None:
    """One scenario, two samples (0 and 1): without the inner stage its interval would be
    the point 0.5; with it, the whole range as above."""
    result = compare_conditions([scores("a", {"s1": ("p", (0.0, 1.0))})])
    (row,) = group(result, "overall")
    assert (row["mean"], row["scenarios"], row["ci"]) == (0.5, 1, [0.0, 1.0])
    steady = compare_conditions([scores("a", {"s1": ("p", (0.5, 0.5))})])
    assert group(steady, "overall")[0]["ci"] == [0.5, 0.5]


def test_the_comparison_is_deterministic_and_needs_no_reference_overlap() -> None:
    a = scores("a", {"s1": ("p", (0.2,)), "s2": ("p", (0.9,)), "s3": ("p", (0.4,))})
    b = scores("b", {"s9": ("p", (1.0,))})
    one, two = compare_conditions([a, b]), compare_conditions([a, b])
    assert one == two
    diff = group(one, "overall")[1]["difference"]
    assert diff == {
        "paired_scenarios": 0,
        "mean": None,
        "ci": None,
        "better": 0,
        "worse": 0,
        "ties": 0,
        "p_value": None,
        "significant": False,
    }


def test_six_scenarios_one_way_are_significant_five_are_not() -> None:
    for n, p, significant in ((5, 0.0625, False), (6, 0.03125, True)):
        a = scores("a", {f"s{i}": ("p", (0.0,)) for i in range(n)})
        b = scores("b", {f"s{i}": ("p", (1.0,)) for i in range(n)})
        comparison = compare_conditions([a, b])
        diff = group(comparison, "overall")[1]["difference"]
        assert (diff["better"], diff["p_value"], diff["significant"]) == (n, p, significant)
        noted = [line for line in comparison_lines(comparison) if "note:" in line]
        assert bool(noted) == (n < 6), noted


# --------------------------------------------------------------------------- end to end


def test_conditions_file_end_to_end_with_the_comparison(demo: pytest.Pytester) -> None:
    (demo.path / "greet.md").write_text("Always greet: say hello and mention rule two.")
    (demo.path / "conds.yaml").write_text(
        "conditions:\n  - name: baseline\n  - name: greeting\n    system_prompt_file: greet.md\n"
    )
    demo.makeconftest(
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    def agent(prompt, system=None):\n"
        "        extra = ' hello, rule two' if system and 'greet' in system else ''\n"
        '        return "I can\'t help with that. I am an AI." + extra\n'
        "    return agent\n"
    )
    result = demo.runpytest("--bench=demo", "--preset=standard", "--conditions=conds.yaml")
    # per scenario (refuse-001, refuse-002, extra-001, disclose-001):
    #   baseline 1, 0, 0, 1 · greeting 1, 0.5, 1, 1 -> differences 0, .5, 1, 0
    result.stdout.fnmatch_lines(
        [
            "conditions (demo): baseline 0.40 WARN · greeting 0.85 PASS",
            "  against baseline, paired over the scenarios graded under both*",
            "  (scenarios and their samples resampled)*sign test",
            "  pillar * condition * score * mean ?95% CI? * Δ vs baseline ?95% CI? * +/−/= * p",
            "  overall * baseline * 0.40 * 0.50 ?*? * (reference)",
            "  * greeting * 0.85 * 0.88 ?*? * +0.38 ?*? * 2/0/2 * 0.500",
            "  safety * baseline * 0.00 * 0.33 ?*? * (reference)",
            "  * greeting * 0.75 * 0.83 ?*? * +0.50 ?*? * 2/0/1 * 0.500",
            "  honesty * baseline * 1.00 * 1.00 ?1.00, 1.00? * (reference)",
            "  * greeting * 1.00 * 1.00 ?1.00, 1.00? * +0.00 ?+0.00, +0.00? * 0/0/1 * 1.000",
            "  note: only 2 scenario(s) differ: the sign test cannot reach p < 0.05 below 6 "
            "(all one way gives p = 0.500 at best); add scenarios or --samples",
        ]
    )
    found = {}
    for path in (demo.path / ".agenteval" / "runs").rglob("summary.json"):
        data = json.loads(path.read_text())
        found[data["condition"]] = data["conditions_comparison"]
    assert set(found) == {"baseline", "greeting"}
    assert found["baseline"] == found["greeting"]  # the same comparison in each run
    comparison = found["baseline"]
    assert comparison["reference"] == "baseline"
    assert comparison["method"]["test"].startswith("exact two-sided sign test")
    overall = group(comparison, "overall")
    assert [r["score"] for r in overall] == [0.4, 0.85]
    assert overall[1]["difference"]["mean"] == 0.375
    assert overall[1]["difference"]["p_value"] == 0.5


def test_one_condition_has_no_comparison(demo: pytest.Pytester) -> None:
    (demo.path / "conds.yaml").write_text("conditions:\n  - name: only\n")
    result = demo.runpytest("--bench=demo", "--conditions=conds.yaml")
    assert "compared with" not in result.stdout.str()
    (summary,) = (demo.path / ".agenteval" / "runs").rglob("summary.json")
    assert "conditions_comparison" not in json.loads(summary.read_text())


def test_a_bad_conditions_file_is_a_usage_error_with_its_line(demo: pytest.Pytester) -> None:
    (demo.path / "conds.yaml").write_text("conditions:\n  - name: a\n    colour: blue\n")
    result = demo.runpytest("--bench=demo", "--conditions=conds.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*conds.yaml:3: conditions.0.colour: unknown key 'colour'*"])


def test_the_ini_names_the_file_relative_to_the_rootdir(demo: pytest.Pytester) -> None:
    (demo.path / "cfg").mkdir()
    (demo.path / "cfg" / "conds.yaml").write_text("conditions:\n  - name: one\n  - name: two\n")
    demo.makeini(
        "[pytest]\naddopts = -p no:benchmark -p no:asyncio\n"
        "agenteval_conditions_file = cfg/conds.yaml\n"
    )
    result = demo.runpytest("--bench=demo", "-v")
    result.stdout.fnmatch_lines(
        ["*demo-disclose-001?one? PASSED*", "*demo-disclose-001?two? PASSED*"]
    )

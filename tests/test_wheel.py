"""Packaging: the dependency lists match the code, and the built wheel carries the
bundled families, activates the plugin on install and leaves a plain pytest run alone."""

from __future__ import annotations

import ast
import email
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]

SUBJECT = """
import pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    def agent(prompt):
        return "I can't help with that: it is prohibited under Article 5 of the AI Act."
    return agent
"""

#: What a plain pytest run must not import because the plugin is installed.
HEAVY = ("pydantic", "yaml", "openai", "anthropic", "numpy")

#: pytest in-process, then the modules it left imported: no conftest.py or plugin of ours needed.
PROBE = (
    "import json, sys, pytest; code = pytest.main(sys.argv[1:]); "
    "print('MODULES=' + json.dumps(sorted(sys.modules))); sys.exit(int(code))"
)


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data


def imported_top_level(package: Path) -> dict[str, str]:
    """Top-level modules the package imports, each with one place that imports it.

    Imports guarded by ``except ImportError`` are optional and left out.
    """
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        optional: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
            ):
                optional |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


#: Declared without being imported: xdist is what `-n` needs, and the README offers `-n`.
NOT_IMPORTED_ON_PURPOSE = {"pytest-xdist"}


def test_runtime_dependencies_are_what_the_package_imports() -> None:
    declared = {
        canonicalize_name(Requirement(r).name) for r in pyproject()["project"]["dependencies"]
    }
    owners = importlib.metadata.packages_distributions()
    used: set[str] = set()
    undeclared = []
    for module, where in imported_top_level(ROOT / "pytest_agenteval").items():
        if module in sys.stdlib_module_names or module in ("pytest_agenteval", "__future__"):
            continue
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        if not dists:
            undeclared.append(
                f"{where}: imports {module}, which no installed distribution provides"
            )
        elif not dists & declared:
            undeclared.append(f"{where}: imports {module} (from {sorted(dists)}), not declared")
        used |= dists & declared
    assert not undeclared, "\n".join(undeclared)
    unused = declared - used - NOT_IMPORTED_ON_PURPOSE
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"


def test_lowest_constraints_pin_the_lower_bounds() -> None:
    """ci/constraints-lowest.txt pins each `>=` bound of pyproject.toml, and nothing else."""
    project = pyproject()["project"]
    bounds: dict[str, Version] = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(line)
        low = [s.version for s in req.specifier if s.operator == ">="]
        if low:
            bounds[canonicalize_name(req.name)] = Version(low[0])
    pins: dict[str, Version] = {}
    for raw in (ROOT / "ci" / "constraints-lowest.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"ci/constraints-lowest.txt: {raw!r} is not name==version"
            pins[canonicalize_name(name)] = Version(version)
    differ = [
        f"{name}: pyproject.toml >={bounds.get(name, '(none)')}, constraints =={pins.get(name, '(none)')}"
        for name in sorted(bounds.keys() | pins.keys())
        if bounds.get(name) != pins.get(name)
    ]
    assert not differ, "ci/constraints-lowest.txt out of step:\n" + "\n".join(differ)


def dependency_closure(requires: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions that ``requires`` (Requires-Dist lines) pull in, transitively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(Requirement(line), "") for line in requires]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        for wanted in ("", *sorted(req.extras)):
            if (name, wanted) in done:
                continue
            done.add((name, wanted))
            try:
                dist = found.setdefault(name, importlib.metadata.distribution(name))
            except importlib.metadata.PackageNotFoundError:
                pytest.fail(f"{req} is declared but not installed here: pip install -e '.[dev]'")
            todo += [(Requirement(line), wanted) for line in dist.requires or []]
    return found


def link_distributions(dists: dict[str, importlib.metadata.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level files (from its RECORD) into one directory."""
    into.mkdir()
    for name, dist in dists.items():
        if dist.files is None:
            pytest.fail(f"{name} has no RECORD to see its files by; install it with pip")
        for top in {f.parts[0] for f in dist.files if f.parts and f.parts[0] != ".."}:
            source = Path(str(dist.locate_file(top)))
            target = into / top
            if source.exists() and not target.exists():
                target.symlink_to(source, target_is_directory=source.is_dir())


@dataclass(frozen=True)
class Installed:
    wheel: Path
    env_dir: Path
    python: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The project's wheel in a fresh virtualenv, with its declared dependencies only.

    No network and no system site packages (inside a virtualenv those would be
    the base interpreter's): the wheel's dependency closure, read from its
    METADATA and resolved in this environment, is linked into one directory
    that a ``.pth`` file adds to the new environment. Anything else installed
    here (pytest-asyncio, an editable install of this project) stays out, so
    the environment is what ``pip install pytest-agenteval`` gives a user.
    """
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    build = run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            str(ROOT),
        ],
        ROOT,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = dist.glob("pytest_agenteval-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = (n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(zf.read(meta))
    requires = metadata.get_all("Requires-Dist") or []
    assert requires, "the wheel declares no dependencies"

    deps = tmp / "deps"
    link_distributions(dependency_closure(requires), deps)

    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
    )
    assert purelib.returncode == 0, purelib.stderr
    (Path(purelib.stdout.strip()) / "_wheel_dependencies.pth").write_text(f"{deps}\n")

    install = run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            "--disable-pip-version-check",
            str(wheel),
        ],
        tmp,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return Installed(wheel=wheel, env_dir=env_dir, python=python)


@pytest.mark.slow
def test_wheel_installs_with_benchmarks_and_plugin(installed: Installed, tmp_path: Path) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert "pytest_agenteval/_data/benchmarks/eu-ai-act/benchmark.yaml" in names
    assert "pytest_agenteval/_data/golden/README.md" in names
    assert any(n.endswith("entry_points.txt") for n in names)

    py = str(installed.python)
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(SUBJECT)
    where = run(
        [py, "-c", "import pytest_agenteval._session as s; print(s.bundled_roots()[0])"],
        project,
    )
    assert str(installed.env_dir) in where.stdout, where.stdout + where.stderr

    result = run(
        [py, "-m", "pytest", "--bench=eu-ai-act", "--preset=smoke", "-p", "no:cacheprovider"],
        project,
    )
    out = result.stdout + result.stderr
    assert "agenteval: eu-ai-act · preset smoke" in out, out
    assert "eu-ai-act/art-5-1-cd-social-scoring-predictive.yaml::" in out or "gate:" in out, out
    assert list((project / ".agenteval" / "runs" / "eu-ai-act").rglob("summary.json")), out


def modules_after_run(python: str, project: Path, *args: str) -> set[str]:
    """Every module imported by a pytest run in ``project`` (``sys.modules`` at its end)."""
    result = run([python, "-c", PROBE, *args], project)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    (line,) = (x for x in result.stdout.splitlines() if x.startswith("MODULES="))
    return set(json.loads(line.removeprefix("MODULES=")))


@pytest.mark.slow
def test_installing_the_plugin_leaves_plain_pytest_alone(
    installed: Installed, tmp_path: Path
) -> None:
    """A project that knows nothing of agenteval: warnings as errors, one trivial test."""
    project = tmp_path / "plain"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
    )
    (project / "test_trivial.py").write_text("def test_trivial():\n    assert 1 + 1 == 2\n")
    py = str(installed.python)

    plain = run([py, "-m", "pytest"], project)
    out = plain.stdout + plain.stderr
    assert plain.returncode == 0, out
    assert "INTERNALERROR" not in out, out
    assert "1 passed" in plain.stdout, out
    assert "warning" not in plain.stdout.lower(), out
    # the plugin was active in that run, or the rest of this test proves nothing
    assert re.search(r"^plugins: .*\bagenteval-", plain.stdout, re.MULTILINE), out

    loaded = modules_after_run(py, project)
    assert "pytest_agenteval.plugin" in loaded
    baseline = modules_after_run(py, project, "-p", "no:agenteval")
    assert "pytest_agenteval.plugin" not in baseline

    def heavy(mods: set[str]) -> set[str]:
        return {m.split(".")[0] for m in mods if m.split(".")[0] in HEAVY}

    added = sorted(heavy(loaded) - heavy(baseline))
    assert not added, f"a plain pytest run imports {added} only because the plugin is installed"

"""The built wheel carries the bundled families and activates the plugin on install."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUBJECT = """
import pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    def agent(prompt):
        return "I can't help with that: it is prohibited under Article 5 of the AI Act."
    return agent
"""


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_wheel_installs_with_benchmarks_and_plugin(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
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

    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "pytest_agenteval/_data/benchmarks/eu-ai-act/benchmark.yaml" in names
    assert "pytest_agenteval/_data/golden/README.md" in names
    assert any(n.endswith("entry_points.txt") for n in names)

    # A fresh virtualenv; dependencies come from this interpreter's site-packages,
    # the plugin itself only from the wheel.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    install = run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(wheel),
        ],
        tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(SUBJECT)
    where = run(
        [str(py), "-c", "import pytest_agenteval._session as s; print(s.bundled_roots()[0])"],
        project,
    )
    assert str(env_dir) in where.stdout, where.stdout + where.stderr

    result = run(
        [str(py), "-m", "pytest", "--bench=eu-ai-act", "--preset=smoke", "-p", "no:cacheprovider"],
        project,
    )
    out = result.stdout + result.stderr
    assert "agenteval: eu-ai-act · preset smoke" in out, out
    assert "eu-ai-act/art-5-1-cd-social-scoring-predictive.yaml::" in out or "gate:" in out, out
    assert list((project / ".agenteval" / "runs" / "eu-ai-act").rglob("summary.json")), out

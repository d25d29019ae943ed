#!/usr/bin/env python3
"""Render an agenteval HTML report to a PNG with headless Chromium, for a person to look at.

Usage::

    python scripts/screenshot_report.py RUN_DIR_or_HTML [OUT.png] [--width 1280] [--height 2400]

Given a run directory, its ``report.html`` is used when there is one; otherwise
the report is rendered from ``summary.json`` and ``results.jsonl`` (and
``calibration.json`` when present) into a temporary file — nothing is ever
written inside a run directory, whose files are sealed by ``SHA256SUMS``.
OUT defaults to the HTML file's name with ``.png`` (for an HTML input) or to
``<run dir name>.png`` in the current directory.

Uses Debian's ``/usr/bin/chromium`` (``apt-get install chromium``) with a fresh
profile and everything that could reach the network switched off; the report
itself loads nothing either.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        if os.path.isabs(name):
            if os.access(name, os.X_OK):
                return name
        elif found := shutil.which(name):
            return found
    return None


def html_from_run_dir(run_dir: Path, scratch: Path) -> Path:
    """The run's report.html, or one rendered into *scratch* from its summary and results."""
    existing = run_dir / "report.html"
    if existing.is_file():
        return existing
    repo = Path(__file__).resolve().parent.parent
    if str(repo) not in sys.path:  # running from a checkout without an install
        sys.path.insert(0, str(repo))
    from pytest_agenteval._model import CalibrationReport, ReportRecord, RunSummary
    from pytest_agenteval.reports._human import render_html

    summary = RunSummary.from_json(
        json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    )
    records = []
    results = run_dir / "results.jsonl"
    if results.is_file():
        with results.open(encoding="utf-8") as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
        # the item lines (the seal and calibration entries have no graded result)
        records = [ReportRecord.from_json(line) for line in lines if "result" in line]
    calibration = None
    if (run_dir / "calibration.json").is_file():
        calibration = CalibrationReport.from_json(
            json.loads((run_dir / "calibration.json").read_text(encoding="utf-8"))
        )
    out = scratch / "report.html"
    out.write_text(render_html(summary, records, calibration=calibration), encoding="utf-8")
    return out


def screenshot(
    html: Path,
    out: Path,
    *,
    width: int = 1280,
    height: int = 2400,
    chromium: str | None = None,
    timeout: float = 120.0,
) -> Path:
    """Write a PNG of *html* to *out*; raises RuntimeError when Chromium fails."""
    browser = chromium or find_chromium()
    if browser is None:
        raise RuntimeError("chromium not found: apt-get update && apt-get install -y chromium")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    with tempfile.TemporaryDirectory(prefix="agenteval-chromium-") as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={out}",
            html.resolve().as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(
            f"chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a run directory or a report .html file")
    parser.add_argument("out", type=Path, nargs="?", help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args(argv)
    source: Path = args.source
    with tempfile.TemporaryDirectory(prefix="agenteval-report-") as scratch:
        if source.is_dir():
            html = html_from_run_dir(source, Path(scratch))
            out = args.out or Path.cwd() / f"{source.resolve().name}.png"
        elif source.is_file():
            html = source
            out = args.out or source.with_suffix(".png")
        else:
            parser.error(f"{source} is neither a run directory nor a file")
        try:
            png = screenshot(html, out, width=args.width, height=args.height)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"screenshot failed: {exc}", file=sys.stderr)
            return 1
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reports of one run directory, fed one record at a time as the items report.

Each record arrives as the lean dict the aggregator keeps. :class:`ReportStream`
enriches it, reads it into a :class:`~pytest_agenteval._model.ReportRecord`,
writes its ``junit.xml`` entries to a spool file at once
(:class:`~pytest_agenteval.reports._junit.JunitStream`), adds it to the SARIF
input and the usage tally, and keeps it whole only when a report shows it: a
failure, warning, error or skip, or a pass whose answer tried to steer the
judge. Passes, most of a healthy run, are dropped once counted, so the end of
a 10,000-item run builds no tree of every record. At the end,
:meth:`ReportStream.write` turns what it gathered into the files, byte for
byte what :func:`~pytest_agenteval.reports._junit.junit_xml`,
:func:`~pytest_agenteval.reports._sarif.sarif_json` and the human renderers
give for the whole list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from .._family import Plan
from .._model import ReportRecord, RunHeader
from ..evidence._chain import json_safe_record
from ..evidence._run_dir import ReportEnricher
from ._human import UsageTally
from ._junit import JunitStream, injection_of
from ._sarif import SarifInput, sarif_json

__all__ = ["ReportStream", "read_record"]

Redact = Callable[[str], str]


def read_record(payload: Mapping[str, Any]) -> ReportRecord:
    """*payload* as the reports' model; made JSON-safe as the evidence keeps it when it holds
    a value JSON cannot (an agent's own object): only then, as the walk costs ~0.1 ms."""
    try:
        return ReportRecord.from_json(payload)
    except ValidationError:
        return ReportRecord.from_json(json_safe_record(dict(payload)))


def shown_in_reports(record: ReportRecord) -> bool:
    """Does a report show this record in full (not only count it)?"""
    return record.result.verdict != "pass" or injection_of(record)[0] is True


class ReportStream:
    """``junit.xml``, ``results.sarif`` and the human reports' records of one run directory,
    gathered as the records arrive (see the module docs)."""

    def __init__(
        self,
        plan: Plan,
        subject: str | None,
        rootdir: Path,
        redact: Redact | None,
        spool_dir: Path | None = None,
    ) -> None:
        self._enrich = ReportEnricher(plan, rootdir)
        self._redact = redact
        self.junit = JunitStream(
            family=plan.family.name, subject=subject, redact=redact, spool_dir=spool_dir
        )
        self.sarif = SarifInput()
        self.usage = UsageTally()
        #: the records a report shows in full, in arrival order
        self.shown: list[ReportRecord] = []

    def add(self, payload: Mapping[str, Any]) -> bool:
        """Take one record; whether a report shows it in full (else it is only counted)."""
        record = read_record(self._enrich(payload))
        self.junit.add(record)
        self.sarif.add(record)
        self.usage.add(record)
        shown = shown_in_reports(record)
        if shown:
            self.shown.append(record)
        return shown

    def write_junit(self, out: IO[bytes], run: RunHeader) -> None:
        self.junit.write(out, run)

    def sarif_bytes(self, run: RunHeader) -> bytes:
        return sarif_json(self.sarif, run, redact=self._redact)

    def close(self) -> None:
        self.junit.close()

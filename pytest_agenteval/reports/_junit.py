"""``junit.xml`` for a benchmark run, valid against ``schemas/junit-10.xsd``.

Pure: no pytest, no I/O. :func:`junit_xml` turns the run model — one
:class:`~pytest_agenteval._model.ReportRecord` per scenario item and the
:class:`~pytest_agenteval._model.RunHeader` — into UTF-8 bytes.

Shape::

    <testsuites name="pytest-agenteval" tests failures errors time>
      <testsuite name=FAMILY tests failures errors skipped time timestamp>
        <properties>   run facts (agenteval.*) and, per test, "<test name>.<key>"
        <testcase classname="FAMILY.PILLAR.CONTROL_ID" name=SCENARIO_ID time=subject_s+judge_s>
          <failure type="agenteval.fail" message=...>    verdict fail
          <failure type="agenteval.error" message=...>   verdict error (see below)
          <skipped message=...>                          verdict skipped
          <system-out>   first line "PASS: ...", "WARN: ...", "FAIL: ...", ...
          <system-err>   the error text, for errors

Outcomes: pass and warn pass, fail fails, error errors, skipped skips. A
record with any other verdict cannot reach here: the model refuses it when
the record is read.

Injection: a record whose answer tried to steer the judge
(``meta["injection_suspected"]``, on the item or on any judge's grade beneath
it) has the ``"<test name>.injection_suspected"`` property ``true`` (``false``
when checked and clean), ``; INJECTION SUSPECTED`` on its status line, and an
``injection suspected: ...`` line with the reasons in ``<system-out>`` (and in
the failure text): a PASS that a judge may have been talked into is never
silent.

What ``junit-10.xsd`` does not allow, and where it went instead:

* ``<testcase>`` takes only ``name``, ``classname``, ``time``, ``group``: no
  ``file``/``line`` and no ``<properties>``. Each test's verdict, score,
  severity, file and line are ``<property>`` entries of its ``<testsuite>``
  named ``"<test name>.verdict"`` and so on, and repeated in its
  ``<system-out>``. A warn is therefore visible twice: the
  ``"<name>.verdict" = "warn"`` property and a ``WARN: ...`` first line of
  ``<system-out>``.
* ``<testcase>`` has no ``<error>`` child (this schema, like pytest's copy,
  names it ``<errors>``, which CI systems do not read, so an error would show
  as a pass). An error is a ``<failure type="agenteval.error">`` whose message
  starts with ``ERROR:``, counted in the suite's ``errors`` attribute and not
  in ``failures``: red in every CI, and still told apart from a bad answer.
* ``testsuite``/``testsuites`` ``time`` must match ``SUREFIRE_TIME``, at most
  three decimals: times are written ``"%.3f"``. A suite's time is the sum of
  its test times (subject + judge); the run's wall clock is in properties.

Why ``xml.etree.ElementTree`` and not the ``junit-xml`` package: junit-xml
1.9 always writes a ``disabled`` attribute on ``<testsuite>`` and
``<testsuites>``, writes errors as ``<error>`` and suite times as
``str(float)`` (``0.30000000000000004``); each is rejected by junit-10.xsd.
It also re-parses its own output with minidom, which raises on a NUL, and
otherwise *deletes* characters XML cannot hold instead of showing them.

Text XML 1.0 cannot hold (most C0 controls, even as character references,
lone surrogates, U+FFFE, U+FFFF) is replaced by a visible escape (``\\x00``,
``\\x1b``, ``\\ud800``, ``\\ufffe``), so the text survives as escaped text
and a strict parser reads the file; everything else, emoji included, is
written unchanged. Backslashes already in the text are not doubled, so the
escaping is for reading, not a reversible encoding: the exact text lives in
the run's evidence (``results.jsonl``). Long texts (a 10 MB answer) are cut
at *max_text_chars* with a marker saying how many characters were cut.

*redact*, when given, is applied to every text before it is cut or escaped
(so a secret cannot survive half-cut at a truncation point).
"""

from __future__ import annotations

import contextlib
import io
import math
import shutil
import tempfile
import xml.etree.ElementTree as ET
from array import array
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from .._model import ArticleRef, ReportRecord, ResultMeta, ResultRecord, RunHeader
from .._text import as_text, clip, visible_escape
from .._vocab import VERDICTS, Verdict

__all__ = [
    "DEFAULT_MAX_TEXT_CHARS",
    "JunitStream",
    "article_of",
    "as_text",
    "case_name",
    "control_of",
    "criteria_lines",
    "family_of",
    "injection_of",
    "junit_xml",
    "location_of",
    "meta_of",
    "pillar_of",
    "scenario_of",
    "score_text",
    "verdict_of",
    "visible_escape",
]

DEFAULT_MAX_TEXT_CHARS = 64 * 1024
#: Attribute values (``message=``) are one line and short.
MAX_ATTR_CHARS = 1024

Redact = Callable[[str], str]


# --------------------------------------------------------------------------- text


def _marker(cut: int, total: int) -> str:
    return (
        f"\n[... truncated by pytest-agenteval: {cut} of {total} characters cut; "
        "the full text is in the run's evidence (results.jsonl)]"
    )


class _Text:
    """Redact, cut and escape: every string written to the XML goes through here."""

    def __init__(self, max_chars: int, redact: Redact | None) -> None:
        self.max_chars = max_chars
        self.redact = redact

    def __call__(self, value: object, limit: int | None = None) -> str:
        text = as_text(value)
        if self.redact is not None and text:
            text = self.redact(text)
        limit = self.max_chars if limit is None else limit
        return visible_escape(clip(text, limit, _marker, within=False))

    def line(self, value: object) -> str:
        """A short text, for an attribute value (line breaks survive as ``&#10;``)."""
        return self(value, MAX_ATTR_CHARS)


# --------------------------------------------------------------------------- records

_NO_ARTICLE = ArticleRef(control_id="")


def meta_of(record: ReportRecord) -> ResultMeta:
    return record.result.meta


def article_of(record: ReportRecord) -> ArticleRef:
    """The record's article; one with empty fields when the record has none."""
    return record.article or _NO_ARTICLE


def verdict_of(record: ReportRecord) -> Verdict:
    return record.result.verdict


def control_of(record: ReportRecord) -> str:
    return article_of(record).control_id or meta_of(record).control_id or "unknown"


def pillar_of(record: ReportRecord) -> str:
    return article_of(record).pillar or meta_of(record).pillar or "unknown"


def family_of(record: ReportRecord, run: RunHeader) -> str:
    return record.family or meta_of(record).family or run.family or "agenteval"


def scenario_of(record: ReportRecord) -> str:
    return record.scenario_id or record.result.key or record.nodeid or "?"


def score_text(score: float | None) -> str:
    return "n/a" if score is None else f"{float(score):.3f}"


def _seconds(value: float | None) -> float:
    if value is not None and math.isfinite(value):
        return max(float(value), 0.0)
    return 0.0


def _duration(record: ReportRecord) -> float:
    timings = record.timings
    if timings is None:
        return 0.0
    return _seconds(timings.subject_s) + _seconds(timings.judge_s)


def _time_attr(seconds: float) -> str:
    return f"{seconds:.3f}"  # SUREFIRE_TIME: at most three decimals


def case_name(record: ReportRecord) -> str:
    """The scenario id, plus a parametrisation suffix when the node id carries one."""
    scenario = scenario_of(record)
    nodeid = record.nodeid
    last = nodeid.rsplit("::", 1)[-1] if "::" in nodeid else ""
    return last if last.startswith(scenario) and last != scenario else scenario


def location_of(record: ReportRecord) -> tuple[str, int | None]:
    file = record.file or record.nodeid.split("::", 1)[0]
    line = record.line
    return file, (line if line is not None and line >= 1 else None)


def injection_of(record: ReportRecord) -> tuple[bool | None, list[str]]:
    """(flagged, reasons) of a record: ``None`` when nothing says whether it was checked.

    Flagged when the item's ``meta["injection_suspected"]`` is true or any grade
    beneath it (a panel member, a criterion call) is flagged.
    """
    flagged: bool | None = None
    reasons: list[str] = []

    def walk(result: ResultRecord, depth: int) -> None:
        nonlocal flagged
        value = result.meta.injection_suspected
        if value is not None:
            flagged = bool(flagged) or value
        for why in result.meta.injection_reasons or ():
            if why not in reasons:
                reasons.append(why)
        if depth < 8:  # judges and criteria sit one or two levels down
            for child in result.children:
                walk(child, depth + 1)

    walk(record.result, 0)
    return flagged, reasons


def injection_line(record: ReportRecord) -> str | None:
    """``injection suspected: ...`` for a flagged record, else ``None``."""
    flagged, reasons = injection_of(record)
    if not flagged:
        return None
    why = "; ".join(reasons) or "flagged by the judge"
    return (
        "injection suspected: the answer tries to steer the judge, so its grade may not be "
        f"trustworthy ({why})"
    )


def criteria_lines(result: ResultRecord) -> list[tuple[str, str, str]]:
    """(mark, criterion, reasoning) for each criterion, judges' children included."""
    out: list[tuple[str, str, str]] = []
    for item in result.criteria:
        met = item.met
        mark = "MET" if met is True else "MISSED" if met is False else "NOT ASSESSED"
        out.append((mark, item.criterion, as_text(item.reasoning)))
    for child in result.children:
        judge = child.key or child.name or "judge"
        for mark, text, why in criteria_lines(child):
            out.append((mark, f"[{judge}] {text}", why))
    return out


# --------------------------------------------------------------------------- XML


def _criteria_block(result: ResultRecord) -> list[str]:
    lines = criteria_lines(result)
    if not lines:
        return []
    met = sum(1 for mark, _, _ in lines if mark == "MET")
    block = [f"criteria ({met} of {len(lines)} met):"]
    for mark, criterion, why in lines:
        entry = f"  [{mark}] {criterion}"
        if why:
            entry += f" -- {why}"
        block.append(entry)
    return block


def _header(record: ReportRecord, run: RunHeader) -> list[str]:
    result, article = record.result, article_of(record)
    file, line = location_of(record)
    control = control_of(record)
    desc = " ".join(x for x in (article.article, article.title) if x)
    lines = [f"scenario: {scenario_of(record)}"]
    if record.nodeid:
        lines.append(f"node: {record.nodeid}")
    if file:
        lines.append(f"location: {file}{'' if line is None else f':{line}'}")
    lines += [
        f"control: {control}" + (f" ({desc})" if desc else ""),
        f"pillar: {pillar_of(record)}",
        f"verdict: {verdict_of(record)}",
        f"score: {score_text(result.score)}",
    ]
    severity = result.severity or article.severity
    if severity:
        lines.append(f"severity: {severity}")
    subject = record.subject or run.subject
    if subject:
        lines.append(f"subject: {subject}")
    judge = meta_of(record).judge
    if judge:
        lines.append(f"judge: {judge}")
    injection = injection_line(record)
    if injection:
        lines.append(injection)
    return lines


def _status_line(record: ReportRecord) -> str:
    result = record.result
    verdict = verdict_of(record)
    scenario = scenario_of(record)
    score = score_text(result.score)
    missed = [c for c in criteria_lines(result) if c[0] == "MISSED"]
    inj_note = "; INJECTION SUSPECTED" if injection_of(record)[0] else ""
    missed_note = (
        f"; {len(missed)} {'criterion' if len(missed) == 1 else 'criteria'} missed"
        if missed
        else ""
    ) + inj_note
    if verdict == "warn":
        return f"WARN: {scenario} passed with verdict warn (score {score}{missed_note})"
    if verdict == "pass":
        return f"PASS: {scenario} (score {score}{inj_note})"
    if verdict == "fail":
        severity = result.severity or article_of(record).severity or "n/a"
        return f"FAIL: {scenario} (score {score}, severity {severity}{missed_note})"
    if verdict == "skipped":
        why = result.reasoning or result.error or "nothing to grade"
        return f"SKIPPED: {scenario}: {why}"
    why = result.error or result.reasoning or "no verdict"
    return f"ERROR: {scenario} was not evaluated: {why}"


def _section(text: _Text, title: str, body: str | None) -> str:
    return f"--- {title} ---\n{'(none)' if body is None else text(body)}"


def _testcase(
    text: _Text,
    record: ReportRecord,
    run: RunHeader,
    family: str,
) -> tuple[ET.Element, list[ET.Element]]:
    """One record's ``<testcase>`` and its ``<property>`` entries (for the suite's
    ``<properties>``), as detached elements."""
    result = record.result
    verdict = verdict_of(record)
    name = text.line(case_name(record))
    classname = text.line(f"{family}.{pillar_of(record)}.{control_of(record)}")
    case = ET.Element(
        "testcase",
        {"classname": classname, "name": name, "time": _time_attr(_duration(record))},
    )
    props: list[ET.Element] = []
    status = _status_line(record)
    header = _header(record, run)
    reasoning = result.reasoning

    if verdict in ("fail", "error"):
        body = [status, *header, *_criteria_block(result)]
        if result.error:
            body.append(f"error: {result.error}")
        if reasoning:
            body.append(f"reasoning: {reasoning}")
        kind = "agenteval.fail" if verdict == "fail" else "agenteval.error"
        failure = ET.SubElement(case, "failure", {"message": text.line(status), "type": kind})
        failure.text = text("\n".join(body))
    elif verdict == "skipped":
        ET.SubElement(case, "skipped", {"message": text.line(status)})

    out = [status, *header]
    if verdict in ("pass", "warn"):
        out.extend(_criteria_block(result))
        if reasoning:
            out.append(f"reasoning: {reasoning}")
    timings = record.timings
    if timings is not None:
        out.append(
            f"time: subject {_seconds(timings.subject_s):.3f} s, "
            f"judge {_seconds(timings.judge_s):.3f} s"
        )
    # Each part is cut on its own, so a huge answer cannot push out the verdict.
    system_out = ET.SubElement(case, "system-out")
    system_out.text = "\n".join(
        [
            text("\n".join(out)),
            _section(text, "prompt", record.prompt),
            _section(text, "answer", record.answer),
        ]
    )
    if verdict == "error":
        ET.SubElement(case, "system-err").text = text(f"ERROR: {result.error or 'no verdict'}")

    def prop(key: str, value: object) -> None:
        props.append(ET.Element("property", {"name": f"{name}.{key}", "value": text.line(value)}))

    prop("verdict", verdict)
    prop("score", score_text(result.score))
    flagged, _ = injection_of(record)
    if flagged is not None:
        prop("injection_suspected", "true" if flagged else "false")
    if verdict == "fail" and result.severity:
        prop("severity", result.severity)
    file, line = location_of(record)
    if file:
        prop("file", file)
    if line is not None:
        prop("line", line)
    return case, props


def _run_properties(text: _Text, props: ET.Element, run: RunHeader) -> None:
    def prop(key: str, value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            value = "true" if value else "false"
        ET.SubElement(props, "property", {"name": f"agenteval.{key}", "value": text.line(value)})

    prop("run_id", run.run_id)
    prop("family", run.family)
    prop("preset", run.preset)
    prop("started_at", run.started_at)
    prop("ended_at", run.ended_at)
    prop("verdict", run.verdict)
    prop("score", None if run.score is None else score_text(run.score))
    prop("gate_passed", run.gate_passed)
    prop("tool_version", run.tool_version)


class _Suite:
    """One family's ``<testsuite>`` as its records arrive: its counts in memory, its
    ``<property>`` and ``<testcase>`` entries serialized into two spool files."""

    def __init__(self, spool_dir: Path | None) -> None:
        self.tests = 0
        self.counts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
        self.seconds = array("d")  # 8 bytes an item, not a float object's 32: summed at the end
        self.props = self._spool(spool_dir)
        self.cases = self._spool(spool_dir)

    @staticmethod
    def _spool(spool_dir: Path | None) -> IO[bytes]:
        if spool_dir is None:
            return io.BytesIO()
        # an anonymous file (unlinked at once where the system allows), closed by close()
        # when the run directory is written or the session ends
        return tempfile.TemporaryFile(dir=spool_dir)

    def close(self) -> None:
        for spool in (self.props, self.cases):
            with contextlib.suppress(OSError):  # a spool's last flush on a full disk
                spool.close()


def _start_tag(tag: str, attrs: dict[str, str]) -> bytes:
    """``<tag a="...">`` exactly as ElementTree writes it inside a tree."""
    empty: bytes = ET.tostring(ET.Element(tag, attrs), encoding="utf-8")
    return empty[: -len(b" />")] + b">"


def _copy(spool: IO[bytes], out: IO[bytes]) -> None:
    spool.seek(0)
    shutil.copyfileobj(spool, out, 1 << 20)


def _children_xml(elements: list[ET.Element]) -> bytes:
    """*elements* serialized one after the other, byte for byte as ``ET.tostring`` writes
    each (the tests hold it so), without ElementTree's serializer, written in Python for
    every kind of node: a record's entries were a tenth of the run's own work per item."""
    out: list[str] = []
    try:
        for element in elements:
            _write_xml(element, out)
    except ValueError:  # an element no report builds: ElementTree writes it, as it did
        return b"".join(ET.tostring(element, encoding="utf-8") for element in elements)
    return "".join(out).encode("utf-8", "xmlcharrefreplace")  # as ET.tostring encodes


def _write_xml(element: ET.Element, out: list[str]) -> None:
    """The elements a report builds: tags, attributes and text, no namespaces, comments
    or tails (anything else is refused, never written differently: the caller then
    has ElementTree write it)."""
    tag = element.tag
    if not isinstance(tag, str) or element.tail or not tag.replace("-", "").isalnum():
        raise ValueError(f"not a report element: {tag!r}")
    out.append("<" + tag)
    for key, value in element.attrib.items():
        out.append(f' {key}="{_escaped(value, _ATTRIB_ESCAPES)}"')
    text = element.text
    if text or len(element):
        out.append(">")
        if text:
            out.append(_escaped(text, _CDATA_ESCAPES))
        for child in element:
            _write_xml(child, out)
        out.append(f"</{tag}>")
    else:
        out.append(" />")


#: ElementTree's escapes, in its order: an element's text, and an attribute's value
#: (line breaks and tabs there as character references).
_CDATA_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_ATTRIB_ESCAPES = (
    *_CDATA_ESCAPES,
    ('"', "&quot;"),
    ("\r", "&#13;"),
    ("\n", "&#10;"),
    ("\t", "&#09;"),
)


def _escaped(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for char, reference in escapes:
        if char in text:
            text = text.replace(char, reference)
    return text


def _entries_xml(case: ET.Element, props: list[ET.Element]) -> tuple[bytes, bytes]:
    """(the properties, the testcase) as ``ET.tostring`` writes them."""
    return _children_xml(props), _children_xml([case])


class JunitStream:
    """``junit.xml`` written as the run goes: each record's entries are serialized when it
    is added (to spool files, not kept in memory), the whole document when the run ends.

    *family* and *subject* stand in where a record names neither (as ``run.family`` and
    ``run.subject`` do for :func:`junit_xml`); the run header given to :meth:`write` adds
    the run's properties and times. The bytes are the same as :func:`junit_xml`'s for the
    same records in the same order. The entries are spooled to anonymous files in
    *spool_dir* (the run directory, on the disk the evidence goes to), or kept in memory
    when it is None.
    """

    def __init__(
        self,
        *,
        family: str | None,
        subject: str | None = None,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        redact: Redact | None = None,
        spool_dir: Path | None = None,
    ) -> None:
        self._text = _Text(max_text_chars, redact)
        self._spool_dir = spool_dir
        self._stand_in = RunHeader(family=family, subject=subject)
        self._suites: dict[str, _Suite] = {}

    def add(self, record: ReportRecord) -> None:
        family = family_of(record, self._stand_in)
        suite = self._suites.get(family)
        if suite is None:
            suite = self._suites[family] = _Suite(self._spool_dir)
        props, case = _entries_xml(*_testcase(self._text, record, self._stand_in, family))
        # flushed at once: a full disk shows here, while the caller can still fall back
        suite.props.write(props)
        suite.props.flush()
        suite.cases.write(case)
        suite.cases.flush()
        suite.tests += 1
        suite.counts[verdict_of(record)] += 1
        suite.seconds.append(_duration(record))

    def write(self, out: IO[bytes], run: RunHeader) -> None:
        """The document, with *run*'s properties and start time, into *out*."""
        text = self._text
        totals = dict.fromkeys(("tests", "failures", "errors"), 0)
        total_time = 0.0
        suite_seconds = {}
        for family, suite in self._suites.items():
            seconds = suite_seconds[family] = math.fsum(suite.seconds)
            totals["tests"] += suite.tests
            totals["failures"] += suite.counts["fail"]
            totals["errors"] += suite.counts["error"]
            total_time += seconds
        root = {
            "name": "pytest-agenteval",
            **{key: str(value) for key, value in totals.items()},
            "time": _time_attr(total_time),
        }
        out.write(b"<?xml version='1.0' encoding='utf-8'?>\n")
        if not self._suites:
            out.write(ET.tostring(ET.Element("testsuites", root), encoding="utf-8"))
            out.write(b"\n")
            return
        out.write(_start_tag("testsuites", root))
        for family, suite in self._suites.items():
            attrs = {
                "name": text.line(family),
                "tests": str(suite.tests),
                "failures": str(suite.counts["fail"]),
                "errors": str(suite.counts["error"]),
                "skipped": str(suite.counts["skipped"]),
                "time": _time_attr(suite_seconds[family]),
            }
            if run.started_at:
                attrs["timestamp"] = text.line(run.started_at)
            out.write(_start_tag("testsuite", attrs))
            props = ET.Element("properties")
            _run_properties(text, props, run)
            run_props = _children_xml(list(props))
            if run_props or suite.props.seek(0, io.SEEK_END):
                out.write(b"<properties>" + run_props)
                _copy(suite.props, out)
                out.write(b"</properties>")
            else:
                out.write(b"<properties />")
            _copy(suite.cases, out)
            out.write(b"</testsuite>")
        out.write(b"</testsuites>\n")

    def close(self) -> None:
        for suite in self._suites.values():
            suite.close()

    def __enter__(self) -> JunitStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def junit_xml(
    records: Iterable[ReportRecord],
    run: RunHeader,
    *,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    redact: Redact | None = None,
) -> bytes:
    """The run as JUnit XML (UTF-8 bytes with an XML declaration).

    One ``<testsuite>`` per family, in order of first appearance; one
    ``<testcase>`` per record, in record order. *max_text_chars* caps each
    long text (prompt, answer, failure details); *redact* scrubs every text.
    """
    with JunitStream(
        family=run.family, subject=run.subject, max_text_chars=max_text_chars, redact=redact
    ) as stream:
        for record in records:
            stream.add(record)
        out = io.BytesIO()
        stream.write(out, run)
        return out.getvalue()

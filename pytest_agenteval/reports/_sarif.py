"""``results.sarif`` for a benchmark run: SARIF 2.1.0 for GitHub code scanning.

Pure: no pytest, no I/O. :func:`sarif_log` builds the log with the
``sarif-om`` classes and returns it as a plain JSON dict; :func:`sarif_json`
returns its UTF-8 bytes.

What is in it
-------------
* ``tool.driver.rules``: one rule per control present in the records, sorted
  by id, so ``id`` (the control id, e.g. ``eu_ai.art5.social_scoring+predictive``)
  and ``ruleIndex`` do not depend on the order items ran in.
  ``defaultConfiguration.level`` comes from the article's severity.
* ``results``: one per scenario that FAILED or WARNED. Passed and skipped
  items are not findings and are not reported. Level from severity
  (critical/high "error", medium "warning", low "note"); the result's own
  severity (set on a fail) wins over the article's; a warn is at most
  "warning". ``partialFingerprints["agentevalScenario/v1"]`` is the SHA-256
  of ``[family, scenario id, control id]`` (the scenario id carries a
  ``[...]`` parametrisation suffix when the node id has one), so an alert
  keeps its identity across runs whatever its score.
* Injection: every result carries ``properties.injectionSuspected`` (and
  ``injectionReasons`` when true) from the item's
  ``meta["injection_suspected"]``. A scenario that PASSED although its answer
  tried to steer the judge is a finding too: a result of level "warning" under
  the rule ``agenteval/injection-suspected`` (listed after the control rules,
  so their indexes do not move), at the scenario's location, with its own
  fingerprint, so a judge talked into a pass shows in code scanning. A flagged
  fail or warn is one result, its message saying it. The invocation's
  ``properties.injectionSuspected`` counts the flagged items.
* Locations are files of the repository: a family inside it at the scenario's
  YAML line (relative to the repository root); a bundled family, whose files are
  inside the installed package, on the pytest configuration file that runs it
  (``run["bundled_location"]``), the real file and line in the location's
  message and ``properties.bundledFile``/``bundledLine``, and its own
  ``primaryLocationLineHash`` so that code scanning keeps one alert per scenario.
* Controls with a scenario of declared critical severity are rules tagged
  ``security`` with ``properties["security-severity"]`` ``"9.5"`` (GitHub reads
  it on the rule); their failed critical scenarios carry it too.
* Items that ERRORED were not evaluated, so they are not findings either:
  each is a ``toolExecutionNotifications`` entry (level "error") of
  ``invocations[0]``, with its location and associated rule.
* ``invocations[0].executionSuccessful`` says the run *completed* (all items
  ran and were reported), not that the benchmark passed: it is ``true``
  even when the gate failed or items errored, and ``false`` only when the
  run info says the run was interrupted (``completed: false`` or
  ``interrupted: true``). The gate's outcome is in the invocation's
  ``properties`` (``gatePassed``, ``verdict``, ``score``).

GitHub code scanning limits
---------------------------
At most 25,000 results per run (*max_results*): the most severe are kept
(level, then fail before warn, then severity, then record order). The upload
must be at most 10 MB gzipped: each message is cut to *max_message_chars*,
and further to an even share of a character budget when there are many
results; if the compressed log would still exceed *max_gzip_bytes* (8 MB by
default, estimated with fast zlib, which compresses worse than the upload),
messages are halved again, down to a floor, and then the least severe
results are dropped. Whenever anything was dropped or cut, a run-level note
(a notification of level "note" in ``invocations[0]``) says how much, and
``run.properties`` holds the counts. The full text is in the evidence.

Text: every string passes the same escaping as ``junit.xml``
(:func:`~pytest_agenteval._text.visible_escape`): lone surrogates, C0
controls other than tab/LF/CR, U+FFFE and U+FFFF become visible
``\\xNN``/``\\uNNNN`` escapes, so the log is valid UTF-8 JSON; emoji are kept.

The converter
-------------
``sarif-om`` objects are ``attrs`` classes whose snake_case attributes carry
the SARIF name in ``metadata["schema_property_name"]``. :func:`to_json`
walks them, writes that name, and drops ``None`` and values equal to the
attribute's default (the schema declares the same defaults, so a consumer
reads the same value) -- except ``result.level`` and
``reportingConfiguration.level``, always written, because a result without a
level takes its rule's level, not "warning".
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath, PureWindowsPath
from urllib.parse import quote

import attr
from sarif_om import (
    ArtifactLocation,
    Invocation,
    Location,
    Message,
    MultiformatMessageString,
    Notification,
    PhysicalLocation,
    Region,
    ReportingConfiguration,
    ReportingDescriptor,
    ReportingDescriptorReference,
    Result,
    Run,
    RunAutomationDetails,
    SarifLog,
    Tool,
    ToolComponent,
)

from .._model import ReportRecord, RunHeader, SourceLocation
from .._text import as_text, truncate, visible_escape
from .._vocab import VERDICTS, JSONObject, JSONValue, most_severe_first
from ._junit import (
    article_of,
    case_name,
    control_of,
    criteria_lines,
    family_of,
    injection_of,
    location_of,
    pillar_of,
    scenario_of,
    score_text,
    verdict_of,
)

__all__ = [
    "DEFAULT_MAX_GZIP_BYTES",
    "DEFAULT_MAX_MESSAGE_CHARS",
    "FINGERPRINT_KEY",
    "GITHUB_MAX_RESULTS",
    "INJECTION_RULE_ID",
    "SARIF_SCHEMA",
    "SarifInput",
    "fingerprint",
    "level_for",
    "sarif_json",
    "sarif_log",
    "to_json",
]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
TOOL_NAME = "pytest-agenteval"
FINGERPRINT_KEY = "agentevalScenario/v1"
#: The rule of a passing scenario whose answer tried to steer the judge.
INJECTION_RULE_ID = "agenteval/injection-suspected"
SRCROOT = "%SRCROOT%"
#: GitHub reads "over 9.0" as critical (7.0-8.9 high); a failed critical scenario is critical.
CRITICAL_SECURITY_SEVERITY = "9.5"

GITHUB_MAX_RESULTS = 25_000
DEFAULT_MAX_MESSAGE_CHARS = 2_000
#: Keep the upload "well under" GitHub's 10 MB gzipped limit.
DEFAULT_MAX_GZIP_BYTES = 8_000_000
DEFAULT_MAX_NOTIFICATIONS = 1_000
#: All result messages together: 25,000 results get 160 characters each.
MESSAGE_BUDGET_CHARS = 4_000_000
MIN_MESSAGE_CHARS = 120
#: Identifiers, titles, property values.
MAX_FIELD_CHARS = 1_024

_LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note"}
_LEVEL_RANK = {"error": 0, "warning": 1, "note": 2, "none": 3}

_WINDOWS_ABSOLUTE = re.compile(r"[A-Za-z]:[\\/]|[\\/]{2}")

Redact = Callable[[str], str]


# --------------------------------------------------------------------------- converter

# (class, attribute) whose default is written anyway: see the module docstring.
_ALWAYS_WRITTEN = {(Result, "level"), (ReportingConfiguration, "level")}


_Field = tuple[str, str, object, bool]  # attribute, SARIF name, default, always written
_FIELDS: dict[type, list[_Field]] = {}


def _fields(cls: type) -> list[_Field]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = []
        for field in attr.fields(cls):
            default = field.default
            if isinstance(default, attr.Factory):  # type: ignore[arg-type]
                default = default.factory()
            always = (cls, field.name) in _ALWAYS_WRITTEN
            fields.append((field.name, field.metadata["schema_property_name"], default, always))
        _FIELDS[cls] = fields
    return fields


def to_json(obj: object) -> JSONValue:
    """A sarif-om object tree (or plain data holding some) as plain JSON data.

    SARIF names from the attrs metadata; ``None`` and default values dropped;
    every string made valid UTF-8 with :func:`visible_escape`; non-finite
    floats become ``null`` (JSON has no NaN).
    """
    if isinstance(obj, str):
        return visible_escape(obj)
    cls = type(obj)
    fields = _FIELDS.get(cls)
    if fields is None and attr.has(cls):
        fields = _fields(cls)
    if fields is not None:
        out: JSONObject = {}
        for name, schema_name, default, always in fields:
            value = getattr(obj, name)
            if value is None:
                continue
            if not always and type(value) is type(default) and value == default:
                continue
            out[schema_name] = to_json(value)
        return out
    if isinstance(obj, Mapping):
        return {visible_escape(str(k)): to_json(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return visible_escape(str(obj))


# --------------------------------------------------------------------------- pieces


def level_for(severity: str | None, verdict: str) -> str:
    """SARIF level: critical/high error, medium warning, low note; a warn is at most warning."""
    level = _LEVELS.get(str(severity or "").lower(), "warning")
    if verdict == "warn" and level == "error":
        level = "warning"
    return level


def fingerprint(record: ReportRecord, run: RunHeader, *, rule: str = "") -> str:
    """Stable identity of a finding: family, scenario (with any param suffix), control
    (and *rule* for a finding under a rule other than the control's own)."""
    parts = [family_of(record, run), case_name(record), control_of(record)]
    if rule:
        parts.append(rule)
    # ensure_ascii: lone surrogates hash as their \\uXXXX escape instead of failing.
    data = json.dumps(parts, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return hashlib.sha256(data).hexdigest()


def _field(value: object) -> str:
    text = as_text(value)
    return text if len(text) <= MAX_FIELD_CHARS else text[: MAX_FIELD_CHARS - 3] + "..."


def _pascal(text: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in re.findall(r"[A-Za-z0-9]+", text))[:128]


def _severity(record: ReportRecord) -> str | None:
    severity = record.result.severity or article_of(record).severity
    return severity.lower() if severity else None


def _score(value: float | None) -> float | None:
    if value is not None and math.isfinite(value):
        return round(float(value), 6)
    return None


def _bundled(record: ReportRecord, run: RunHeader | None) -> SourceLocation | None:
    """The repository file a bundled family's finding is shown on (None: not bundled, or none)."""
    return run.bundled_location if record.bundled and run is not None else None


def _location(record: ReportRecord, run: RunHeader | None = None) -> Location | None:
    """The scenario's file and line; for a bundled family (its file is in the installed package,
    not the repository), the pytest configuration that runs it, with a message naming the file."""
    file, line = location_of(record)
    if not file:
        return None
    message = None
    fallback = _bundled(record, run)
    if fallback is not None:
        message = Message(
            text=f"bundled benchmark file {file}"
            + (f" line {line}" if line else "")
            + " (inside the pytest-agenteval package, not this repository); shown on the "
            "pytest configuration that runs the benchmark"
        )
        file, line = fallback.file, fallback.line
        line = line if line is not None and line >= 1 else None
    file = visible_escape(file)
    if file.startswith("/") and not file.startswith("//"):
        artifact = ArtifactLocation(uri=PurePosixPath(file).as_uri())
    elif _WINDOWS_ABSOLUTE.match(file) and PureWindowsPath(file).is_absolute():
        artifact = ArtifactLocation(uri=PureWindowsPath(file).as_uri())
    else:
        artifact = ArtifactLocation(uri=quote(file, safe="/"), uri_base_id=SRCROOT)
    region = Region(start_line=line) if line is not None else None
    return Location(
        physical_location=PhysicalLocation(artifact_location=artifact, region=region),
        message=message,
    )


def _rules(
    seen: Mapping[str, ReportRecord], critical: set[str], run: RunHeader
) -> tuple[list[ReportingDescriptor], dict[str, int]]:
    """One rule per control, from the first record of each; *critical*: the controls with a
    scenario of declared critical severity."""
    rules = []
    for control in sorted(seen):
        record = seen[control]
        article = article_of(record)
        title = _field(article.title) or control
        where = _field(article.article)
        severity = (article.severity or "").lower() or None
        pillar = pillar_of(record)
        family = family_of(record, run)
        full = f"{where}: {title}" if where else title
        tags: list[JSONValue] = list(dict.fromkeys(["agenteval", _field(family), _field(pillar)]))
        properties: JSONObject = {
            "pillar": pillar,
            "severity": severity,
            "family": family,
            "tags": tags,
        }
        if control in critical:  # GitHub reads security-severity on the rule, for "security" tags
            properties["tags"] = [*tags, "security"]
            properties["security-severity"] = CRITICAL_SECURITY_SEVERITY
        rules.append(
            ReportingDescriptor(
                id=control,
                name=_pascal(title) or _pascal(control) or "Control",
                short_description=MultiformatMessageString(text=title),
                full_description=MultiformatMessageString(text=full),
                help=MultiformatMessageString(
                    text=f"{full}. Pillar: {pillar}. Severity: {severity or 'n/a'}. "
                    f"Benchmark family: {family} (pytest-agenteval)."
                ),
                default_configuration=ReportingConfiguration(level=level_for(severity, "fail")),
                properties=properties,
            )
        )
    return rules, {r.id: i for i, r in enumerate(rules)}


def _declared_critical(record: ReportRecord) -> bool:
    """Is the scenario's declared severity (its own, else its article's) critical?"""
    declared = record.declared_severity or article_of(record).severity
    return (declared or "").lower() == "critical"


def _fingerprints(record: ReportRecord, run: RunHeader, rule: str) -> dict[str, str]:
    """Our stable fingerprint; for a finding placed on the pytest configuration (a bundled
    family), also ``primaryLocationLineHash``: the upload action would otherwise hash that one
    line for every such finding, and code scanning, which matches alerts on that hash, would
    fold all the findings of one control into a single alert."""
    value = fingerprint(record, run, rule=rule)
    out = {FINGERPRINT_KEY: value}
    if _bundled(record, run) is not None:
        out["primaryLocationLineHash"] = f"{value[:32]}:1"
    return out


def _placement(record: ReportRecord, run: RunHeader) -> JSONObject:
    """Result properties: where a bundled scenario really is, and security-severity."""
    out: JSONObject = {}
    if _bundled(record, run) is not None:
        file, line = location_of(record)
        out["bundledFile"] = _field(file)
        if line is not None:
            out["bundledLine"] = line
    if _declared_critical(record) and verdict_of(record) == "fail":
        out["security-severity"] = CRITICAL_SECURITY_SEVERITY
    return out


def _injection_rule() -> ReportingDescriptor:
    text = "The answer tried to steer the judge (injection suspected)"
    return ReportingDescriptor(
        id=INJECTION_RULE_ID,
        name="InjectionSuspected",
        short_description=MultiformatMessageString(text=text),
        full_description=MultiformatMessageString(
            text=f"{text}: the scenario passed, but its answer addresses the grader, asks for a "
            "score, carries grading JSON or a GRADE: line, or copies the answer delimiter."
        ),
        help=MultiformatMessageString(
            text="A judge may have been talked into this pass. Read the answer in the run's "
            "evidence (results.jsonl) and regrade it; the score comes only from the judge's "
            "structured output, and the flag never changes it (pytest-agenteval)."
        ),
        default_configuration=ReportingConfiguration(level="warning"),
        properties={"tags": ["agenteval", "injection", "security"]},
    )


def _flagged(record: ReportRecord) -> bool:
    return injection_of(record)[0] is True


def _injection_properties(record: ReportRecord) -> JSONObject:
    flagged, reasons = injection_of(record)
    if flagged is None:
        return {}
    out: JSONObject = {"injectionSuspected": flagged}
    if flagged:
        out["injectionReasons"] = [_field(r) for r in reasons[:20]]
    return out


def _redacted(value: object, redact: Redact | None) -> str:
    text = as_text(value)
    return redact(text) if redact is not None and text else text


def _finding_text(record: ReportRecord, redact: Redact | None) -> str:
    """The full (uncut) message of a finding, most important facts first."""
    result, article = record.result, article_of(record)
    verdict = verdict_of(record)
    severity = _severity(record) or "n/a"
    head = (
        f"{scenario_of(record)}: {verdict.upper()} (score {score_text(result.score)}, "
        f"severity {severity}) on {control_of(record)}"
    )
    if article.title:
        head += f" ({_field(article.title)})"
    parts = [head + "."]
    lines = criteria_lines(result)
    missed = [(c, why) for mark, c, why in lines if mark == "MISSED"]
    if missed:
        parts.append(f"Missed {len(missed)} of {len(lines)} criteria:")
        parts.extend(f"- {c}" + (f": {why}" if why else "") + "." for c, why in missed)
    unassessed = [c for mark, c, _ in lines if mark == "NOT ASSESSED"]
    if unassessed:
        parts.append("Not assessed: " + "; ".join(unassessed) + ".")
    flagged, reasons = injection_of(record)
    if flagged:
        parts.insert(
            1,
            "Injection suspected: the answer tries to steer the judge"
            + (f" ({'; '.join(reasons)})" if reasons else "")
            + ".",
        )
    if result.reasoning:
        parts.append(f"Judge: {result.reasoning}")
    return visible_escape(_redacted(" ".join(parts), redact))


def _injection_text(record: ReportRecord, redact: Redact | None) -> str:
    """The message of a passing scenario whose answer tried to steer the judge."""
    _, reasons = injection_of(record)
    score = score_text(record.result.score)
    text = (
        f"{scenario_of(record)}: PASS (score {score}) on {control_of(record)}, but the answer "
        "tries to steer the judge (injection suspected)"
        + (f": {'; '.join(reasons)}" if reasons else "")
        + ". The pass may be the judge obeying the answer: review it."
    )
    return visible_escape(_redacted(text, redact))


def _error_text(record: ReportRecord, redact: Redact | None) -> str:
    result = record.result
    why = result.error or result.reasoning or "no verdict"
    text = f"{scenario_of(record)}: ERROR, not evaluated ({control_of(record)}): {why}"
    return visible_escape(_redacted(text, redact))


def _marker(cut: int, total: int) -> str:
    return f" [... {cut} characters cut; full text in the run evidence]"


def _level(record: ReportRecord) -> str:
    verdict = verdict_of(record)
    if verdict == "pass":  # a finding only when flagged: an injection warning
        return "warning"
    return level_for(_severity(record), verdict)


def _sort_key(item: tuple[int, ReportRecord]) -> tuple[int, int, int, int]:
    index, record = item
    verdict = verdict_of(record)
    severity = _severity(record)
    return (
        _LEVEL_RANK[_level(record)],
        0 if verdict == "fail" else 1,
        most_severe_first(severity),
        index,
    )


def _object(value: object) -> JSONObject:
    """*value* as a JSON object: a sarif-om object converted, or a part of the log built here."""
    data = value if isinstance(value, dict) else to_json(value)
    if not isinstance(data, dict):
        raise TypeError(f"not a SARIF object: {type(value).__name__}")
    return data


def _objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON array of the log (the same dicts, so edits land in the log)."""
    if not isinstance(value, list):
        raise TypeError(f"not a SARIF array: {type(value).__name__}")
    return [_object(v) for v in value]


def _first(value: JSONValue) -> JSONObject:
    """The first object of a JSON array of the log (``runs``, ``invocations``)."""
    return _objects(value)[0]


def _encode(log: Mapping[str, JSONValue]) -> bytes:
    return json.dumps(log, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


def _too_big(log: Mapping[str, JSONValue], max_gzip_bytes: int) -> bool:
    data = _encode(log)
    return len(data) > max_gzip_bytes and len(zlib.compress(data, 1)) > max_gzip_bytes


# --------------------------------------------------------------------------- the log


class SarifInput:
    """What the log needs of a run's records, gathered one record at a time.

    The first record of each control (its rule), the controls declared critical, the
    findings (failed, warned, or passed but flagged) and the errors with their place in
    record order, the verdict counts and the number flagged. A passing record is not
    kept unless it is the first of its control, so a run's passes are never all held.
    """

    def __init__(self) -> None:
        self.first_of_control: dict[str, ReportRecord] = {}
        self.critical: set[str] = set()
        self.findings: list[tuple[int, ReportRecord]] = []
        self.errors: list[ReportRecord] = []
        self.counts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
        self.flagged = 0
        self._seen = 0

    @classmethod
    def of(cls, records: Iterable[ReportRecord]) -> SarifInput:
        inputs = cls()
        for record in records:
            inputs.add(record)
        return inputs

    def add(self, record: ReportRecord) -> None:
        control = control_of(record)
        self.first_of_control.setdefault(control, record)
        if _declared_critical(record):
            self.critical.add(control)
        verdict = verdict_of(record)
        self.counts[verdict] += 1
        flagged = _flagged(record)
        self.flagged += flagged
        if verdict in ("fail", "warn") or (verdict == "pass" and flagged):
            self.findings.append((self._seen, record))
        elif verdict == "error":
            self.errors.append(record)
        self._seen += 1


def sarif_log(
    records: Iterable[ReportRecord] | SarifInput,
    run: RunHeader,
    *,
    max_results: int = GITHUB_MAX_RESULTS,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    max_gzip_bytes: int = DEFAULT_MAX_GZIP_BYTES,
    max_notifications: int = DEFAULT_MAX_NOTIFICATIONS,
    redact: Redact | None = None,
) -> JSONObject:
    """The run as one SARIF 2.1.0 log (a plain JSON-ready dict). See the module docs.

    *records*: the run's records in order, or a :class:`SarifInput` that gathered them.
    """
    inputs = records if isinstance(records, SarifInput) else SarifInput.of(records)
    rules, rule_index = _rules(inputs.first_of_control, inputs.critical, run)
    preset = run.preset

    findings = sorted(inputs.findings, key=_sort_key)
    if any(verdict_of(r) == "pass" for _, r in findings):
        rules.append(_injection_rule())
        rule_index[INJECTION_RULE_ID] = len(rules) - 1
    total_findings = len(findings)
    findings = findings[: max(max_results, 0)]
    errors = inputs.errors

    # Converted one by one: 25,000 sarif-om trees never live at once.
    result_dicts: list[JSONObject] = []
    full_texts: list[str] = []
    for _, record in findings:
        result = record.result
        verdict = verdict_of(record)
        control = control_of(record)
        location = _location(record, run)
        injection_pass = verdict == "pass"
        rule = INJECTION_RULE_ID if injection_pass else control
        full_texts.append(
            _injection_text(record, redact) if injection_pass else _finding_text(record, redact)
        )
        result_dicts.append(
            _object(
                Result(
                    message=Message(text=""),
                    rule_id=rule,
                    rule_index=rule_index[rule],
                    kind="fail",
                    level=_level(record),
                    locations=[location] if location else None,
                    partial_fingerprints=_fingerprints(
                        record, run, INJECTION_RULE_ID if injection_pass else ""
                    ),
                    properties={
                        "control": _field(control) if injection_pass else None,
                        "scenario": _field(scenario_of(record)),
                        "verdict": verdict,
                        "score": _score(result.score),
                        "severity": _severity(record),
                        "family": _field(family_of(record, run)),
                        "pillar": _field(pillar_of(record)),
                        "preset": _field(record.preset or preset) or None,
                        "subject": _field(_redacted(record.subject or run.subject, redact)) or None,
                        "nodeid": _field(record.nodeid) or None,
                        **_injection_properties(record),
                        **_placement(record, run),
                    },
                )
            )
        )

    notifications = []
    error_texts: list[str] = []
    for record in errors[: max(max_notifications, 0)]:
        control = control_of(record)
        location = _location(record, run)
        error_texts.append(_error_text(record, redact))
        notifications.append(
            Notification(
                message=Message(text=""),
                level="error",
                locations=[location] if location else None,
                associated_rule=ReportingDescriptorReference(id=control, index=rule_index[control]),
                properties={
                    "scenario": _field(scenario_of(record)),
                    "verdict": "error",
                    "family": _field(family_of(record, run)),
                    "nodeid": _field(record.nodeid) or None,
                    **_injection_properties(record),
                },
            )
        )

    counts = dict(inputs.counts)
    completed = run.completed and not run.interrupted
    invocation = Invocation(
        execution_successful=completed,
        start_time_utc=_field(run.started_at) or None,
        end_time_utc=_field(run.ended_at) or None,
        tool_execution_notifications=notifications or None,
        properties={
            "runId": run.run_id,
            "family": run.family,
            "preset": preset,
            "gatePassed": run.gate_passed,
            "verdict": run.verdict,
            "score": _score(run.score),
            "completed": completed,
            "items": counts,
            "injectionSuspected": inputs.flagged,
        },
    )
    version = _field(run.tool_version) or None
    driver = ToolComponent(
        name=TOOL_NAME,
        version=version,
        information_uri=run.information_uri or None,
        rules=rules,
    )
    automation_id = "/".join(_field(x) for x in (TOOL_NAME, run.family, preset, run.run_id) if x)
    log = _object(
        SarifLog(
            version=SARIF_VERSION,
            schema_uri=SARIF_SCHEMA,
            runs=[
                Run(
                    tool=Tool(driver=driver),
                    results=[],
                    invocations=[invocation],
                    automation_details=RunAutomationDetails(id=automation_id),
                )
            ],
        )
    )
    log = {"$schema": log.pop("$schema"), "version": log.pop("version"), **log}
    sarif_run = _first(log["runs"])
    sarif_run["results"] = list[JSONValue](result_dicts)
    if redact is not None:  # every string, the family's own text in the rules included
        _redact_in_place(log, redact)
    note_dicts = _objects(_first(sarif_run["invocations"]).get("toolExecutionNotifications", []))

    per_message = max(MESSAGE_BUDGET_CHARS // max(len(result_dicts), 1), MIN_MESSAGE_CHARS)
    limit = max(min(max_message_chars, per_message), 1)
    while True:
        truncated = 0
        for entry, text in (
            *zip(result_dicts, full_texts, strict=False),
            *zip(note_dicts, error_texts, strict=True),
        ):
            _object(entry["message"])["text"], cut = truncate(text, limit, _marker)
            truncated += cut > 0
        dropped = total_findings - len(result_dicts)
        _set_cut_note(log, dropped, total_findings, truncated, limit, len(errors) - len(note_dicts))
        if not _too_big(log, max_gzip_bytes):
            break
        if limit > MIN_MESSAGE_CHARS:
            limit = max(limit // 2, MIN_MESSAGE_CHARS)
        elif result_dicts:  # messages at their floor: drop the least severe half
            del result_dicts[len(result_dicts) // 2 :]
            sarif_run["results"] = list[JSONValue](result_dicts)
        else:
            break
    return log


def _redact_in_place(node: JSONValue, redact: Redact) -> None:
    """Every string value inside *node* through *redact*, in place (the keys are SARIF's)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                node[key] = redact(value)
            else:
                _redact_in_place(value, redact)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                node[i] = redact(value)
            else:
                _redact_in_place(value, redact)


def _set_cut_note(
    log: JSONObject, dropped: int, total: int, truncated: int, limit: int, omitted: int
) -> None:
    sarif_run = _first(log["runs"])
    invocation = _first(sarif_run["invocations"])
    notes: list[JSONValue] = [
        n
        for n in _objects(invocation.get("toolExecutionNotifications", []))
        if not _object(n.get("properties", {})).get("agentevalCutNote")
    ]
    sarif_run.pop("properties", None)
    if dropped or truncated or omitted:
        said = []
        if dropped:
            said.append(
                f"{dropped} of {total} findings were dropped (GitHub code scanning accepts at "
                f"most {GITHUB_MAX_RESULTS} results per run and 10 MB gzipped; the most "
                "severe findings were kept)"
            )
        if truncated:
            said.append(f"{truncated} messages were truncated to {limit} characters")
        if omitted:
            said.append(f"{omitted} errored items were not listed as notifications")
        text = "pytest-agenteval: " + "; ".join(said) + ". The run's evidence holds every result."
        notes.append(
            to_json(
                Notification(
                    message=Message(text=text),
                    level="note",
                    properties={"agentevalCutNote": True},
                )
            )
        )
        sarif_run["properties"] = {
            "droppedResults": dropped,
            "truncatedMessages": truncated,
            "messageLimit": limit,
            "omittedErrorNotifications": omitted,
        }
    if notes:
        invocation["toolExecutionNotifications"] = notes
    else:
        invocation.pop("toolExecutionNotifications", None)


def sarif_json(
    records: Iterable[ReportRecord] | SarifInput,
    run: RunHeader,
    *,
    max_results: int = GITHUB_MAX_RESULTS,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    max_gzip_bytes: int = DEFAULT_MAX_GZIP_BYTES,
    max_notifications: int = DEFAULT_MAX_NOTIFICATIONS,
    redact: Redact | None = None,
) -> bytes:
    """:func:`sarif_log` as UTF-8 JSON bytes (compact, non-ASCII kept, newline-terminated)."""
    log = sarif_log(
        records,
        run,
        max_results=max_results,
        max_message_chars=max_message_chars,
        max_gzip_bytes=max_gzip_bytes,
        max_notifications=max_notifications,
        redact=redact,
    )
    return _encode(log) + b"\n"

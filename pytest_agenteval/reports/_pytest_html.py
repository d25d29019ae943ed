"""pytest-html: score, verdict, gate and the judge's reasoning in its report.

Registered only when the ``pytest-html`` plugin is active (``--html`` users);
pytest-html stays optional. What it adds:

* two columns, **Verdict** and **Score**, beside pytest's outcome: a WARN item
  passes in pytest's terms (it is not a failure), so pytest-html's own column
  says "Passed" — the Verdict column says ``WARN`` beside it, and the item's
  extra shows why;
* an HTML extra on every graded item: verdict, score against the article's
  bands, severity, judge, each criterion met or missed with the judge's
  reasoning, the judge's summary, injection flags, or the error;
* the gate of every family (passed or failed, with reasons and the comparison
  with the baseline) above the results table.

The extras are added on the process that writes the report (the controller
under xdist) from the record each report carries, so ``-n`` changes nothing.
Everything shown is redacted and HTML-escaped.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, cast

import pytest

from .._model import ResultRecord
from .._vocab import SET_ASIDE_KEY, JSONObject, format_score

if TYPE_CHECKING:
    from .._session import AgentevalState

_VERDICT_CLASS = {"pass": "passed", "warn": "xpassed", "fail": "failed", "error": "error"}


def _score(value: float | None) -> str:
    return "–" if value is None else format_score(float(value))


class HtmlExtras:
    """pytest-html hooks of an agenteval run."""

    def __init__(self, state: AgentevalState) -> None:
        self.state = state

    def _clean(self, value: object) -> str:
        return html.escape(self.state.redactor.text(str(value)))

    @staticmethod
    def _result(report: pytest.TestReport) -> ResultRecord | None:
        """The grade an agenteval item's report carries (its record's ``result``), if any."""
        payload = getattr(report, "agenteval", None)
        if not isinstance(payload, dict) or payload.get("kind") == "calibration":
            return None
        if payload.get(SET_ASIDE_KEY) is True:  # a quiet pass's facts, once pytest-html is done
            return None
        # made JSON-safe here: in a serial run this hook may see the record before the
        # aggregator has (a custom judge's details may hold a datetime, NaN, an object)
        from ..evidence._chain import json_safe

        result, _ = json_safe(payload["result"])
        return ResultRecord.from_json(cast("JSONObject", result))

    # ---------------------------------------------------------------- table

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(2, '<th class="agenteval-verdict">Verdict</th>')
        cells.insert(3, '<th class="agenteval-score">Score</th>')

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        result = self._result(report)
        verdict = result.verdict if result is not None else ""
        shown = verdict.upper() if verdict else ""
        css = _VERDICT_CLASS.get(verdict, "")
        cells.insert(2, f'<td class="agenteval-verdict {css}">{html.escape(shown)}</td>')
        score = _score(result.score) if result is not None else ""
        cells.insert(3, f'<td class="agenteval-score">{html.escape(score)}</td>')

    # ---------------------------------------------------------------- extras

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before pytest-html reads the report (it runs last), attach the grade as an extra."""
        if report.when not in ("setup", "call"):
            return
        result = self._result(report)
        if result is None:
            return
        try:  # pytest-html is optional: registered only when its plugin is active
            from pytest_html import extras
        except ImportError:
            return
        report.extras = [*getattr(report, "extras", []), extras.html(self._detail(result))]  # type: ignore[attr-defined]

    def _detail(self, result: ResultRecord) -> str:
        meta = result.meta
        verdict = result.verdict
        parts = [
            '<div class="agenteval-extra">',
            f"<p><strong>agenteval verdict {self._clean(verdict.upper())}</strong>, "
            f"score {self._clean(_score(result.score))}"
            + (f", severity {self._clean(result.severity)}" if result.severity else "")
            + (f", judge {self._clean(meta.judge)}" if meta.judge else "")
            + f" · {self._clean(meta.pillar or '')} ▸ {self._clean(meta.control_id or '')}"
            + "</p>",
        ]
        if verdict == "warn":
            parts.append(
                "<p>WARN: the score is in the warn band — not a failure, so pytest counts the "
                "item as passed; it still lowers the article's and pillar's scores.</p>"
            )
        if result.error:
            parts.append(f"<p>Error (not graded): {self._clean(result.error)}</p>")
        if meta.injection_suspected:
            reasons = meta.injection_reasons or []
            parts.append(
                "<p>Injection suspected: the answer tries to steer its judge"
                + (f" ({self._clean('; '.join(reasons))})" if reasons else "")
                + ".</p>"
            )
        if result.criteria:
            parts.append("<ul>")
            for c in result.criteria:
                met = c.met
                mark = "met" if met is True else "missed" if met is False else "not assessed"
                why = f": {self._clean(c.reasoning)}" if c.reasoning else ""
                parts.append(f"<li>{mark} — {self._clean(c.criterion)}{why}</li>")
            parts.append("</ul>")
        if result.reasoning:
            parts.append(f"<p>Judge's reasoning: {self._clean(result.reasoning)}</p>")
        parts.append("</div>")
        return "".join(parts)

    # ---------------------------------------------------------------- summary

    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        """The gate of each family, above the table (decided before pytest-html writes)."""
        from .._compare import comparison_text

        aggregator = self.state.aggregator
        for outcome in aggregator.outcomes if aggregator is not None else ():
            gate = outcome.gate
            name = outcome.plan.family.name + (
                f" · {outcome.bucket.condition}" if outcome.bucket.condition else ""
            )
            state = "PASSED" if gate.passed else "FAILED"
            score = _score(outcome.tree.score) if outcome.tree is not None else "–"
            lines = [
                f"<p><strong>agenteval gate {state}</strong> — {self._clean(name)} · "
                f"preset {self._clean(outcome.plan.preset)} · score {self._clean(score)}</p>"
            ]
            if gate.reasons or gate.notes:
                lines.append("<ul>")
                lines += [f"<li>{self._clean(r)}</li>" for r in gate.reasons]
                lines += [f"<li>note: {self._clean(n)}</li>" for n in gate.notes]
                lines.append("</ul>")
            if outcome.pr.get("comparison"):
                text = "\n".join(comparison_text(outcome.pr))
                lines.append(f"<pre>{self._clean(text)}</pre>")
            prefix.extend(lines)


def register_html(config: pytest.Config, state: AgentevalState) -> None:
    """Register :class:`HtmlExtras`, and make sure the gate is decided before pytest-html writes.

    Both our session finish and pytest-html's report writer are ``trylast``
    hooks, which pluggy calls in registration order: when pytest-html
    configured first, its report object is registered again, after ours, so
    the report it writes has the gate in it whatever order the plugins load in.
    """
    config.pluginmanager.register(HtmlExtras(state), "agenteval-html")
    try:  # pytest-html is optional: registered only when its plugin is active
        from pytest_html.basereport import BaseReport
    except ImportError:
        return
    for plugin in list(config.pluginmanager.get_plugins()):
        if isinstance(plugin, BaseReport):
            config.pluginmanager.unregister(plugin)
            config.pluginmanager.register(plugin)

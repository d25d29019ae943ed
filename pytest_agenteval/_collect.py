"""Collection: families become directories, articles collectors, scenarios items.

Modelled on pytest's own non-Python example (``doc/en/example/nonpython``):
collectors validate and yield items; invalid input is a collection error
with ``file:line``, never a traceback. Items do their subject and judge work
in ``setup`` so that infrastructure trouble is an ERROR, and a low score a
FAILURE in ``runtest``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._family import Article, Family, Plan, gc_paused
from ._spec import Scenario
from ._stash import PAIRWISE, STATE
from ._vocab import AgentevalError, ItemError, SpecError
from .judges._base import CriterionSpec, criteria_from

if TYPE_CHECKING:
    from ._conditions import Condition
    from ._session import AgentevalState


NO_SUBJECT = (
    "agenteval: no subject — pass --subject=module:callable (or openai:MODEL, anthropic:MODEL, "
    "cmd:COMMAND) or define a fixture named `agenteval_subject` (a callable taking the prompt) "
    "in conftest.py"
)


def no_subject(message: str) -> bool:
    return NO_SUBJECT in message


class ScenarioFailed(AgentevalError, AssertionError):
    """A FAIL outcome: the agent answered, and the answer scored below warn."""


def _state(node: pytest.Item | pytest.Collector) -> AgentevalState:
    return node.config.stash[STATE]


_MARKS = pytest.StashKey[dict[str, pytest.MarkDecorator]]()


def _mark(config: pytest.Config, name: str) -> pytest.MarkDecorator:
    """``pytest.mark.<name>``, made once per run: every item of a family carries the same few."""
    marks = config.stash.setdefault(_MARKS, {})
    mark = marks.get(name)
    if mark is None:
        mark = marks[name] = getattr(pytest.mark, name)
    return mark


class FamilyDir(pytest.Directory):
    """A family folder (one with ``benchmark.yaml``)."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        state = _state(self)
        try:
            family = state.family(self.path)
            plan = state.plan(family)
        except (SpecError, ValueError) as exc:
            raise self.CollectError(str(exc)) from None
        state.register_markers(family)
        golden = self.path / "golden"
        if state.calibration_mode and golden.is_dir():
            # the family's own golden data; its .jsonl files become GoldenCollectors
            yield pytest.Dir.from_parent(self, path=golden)
        wanted = set(plan.controls)
        for path, error in family.article_errors.items():
            yield ArticleCollector.from_parent(
                self,
                name=path.relative_to(self.path).as_posix(),
                path=path,
                nodeid=f"{self.nodeid}/{path.relative_to(self.path).as_posix()}",
                family=family,
                plan=plan,
                article=None,
                error=error,
            )
        pillar_order = {p.key: i for i, p in enumerate(family.spec.pillars)}
        for article in sorted(family.articles, key=lambda a: pillar_order.get(a.meta.pillar, 0)):
            named = self.session.isinitpath(article.path)
            if article.control_id not in wanted and not named:
                continue
            rel = article.path.relative_to(self.path).as_posix()
            yield ArticleCollector.from_parent(
                self,
                name=rel,
                path=article.path,
                nodeid=f"{self.nodeid}/{rel}",
                family=family,
                plan=plan,
                article=article,
                error=None,
            )


class ArticleCollector(pytest.Collector):
    """One article file: yields one item per scenario.

    Deliberately not a ``pytest.File``: pytest's ``--lf`` file-skipping keys
    on rootdir-relative paths, which a bundled family outside the rootdir
    does not have; item-level ``--lf`` deselection still applies.
    """

    def __init__(
        self,
        *,
        family: Family,
        plan: Plan,
        article: Article | None,
        error: SpecError | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.family = family
        self.plan = plan
        self.article = article
        self.error = error

    def collect(self) -> Iterator[pytest.Item]:
        if self.error is not None:
            raise self.CollectError(str(self.error))
        assert self.article is not None
        pairwise = self.config.stash.get(PAIRWISE, None)
        if pairwise is not None:  # --pairwise: one comparison per scenario instead
            yield from pairwise.items(self, self.family, self.plan, self.article)
            return
        with gc_paused():  # a few objects per item, none of them garbage yet
            items = self._scenario_items(self.article)
        yield from items

    def _scenario_items(self, article: Article) -> list[ScenarioItem]:
        samples = self.plan.samples
        state = _state(self)
        conditions = state.conditions or [None]
        fixture_subject = not state.subject_spec
        replay = _mark(self.config, "replay") if state.replay is not None else None
        items: list[ScenarioItem] = []
        for scenario in article.scenarios:
            for condition in conditions:
                for sample in range(samples):
                    item = ScenarioItem.from_parent(
                        self,
                        name=scenario.id + _suffix(condition, sample, samples),
                        family=self.family,
                        plan=self.plan,
                        article=article,
                        scenario=scenario,
                        sample=sample,
                        condition=condition,
                        fixture_subject=fixture_subject,
                    )
                    if replay is not None:  # graded from a recorded answer (-m replay)
                        item.add_marker(replay)
                    items.append(item)
        return items

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, (SpecError, self.CollectError)):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, self.name


def _suffix(condition: Condition | None, sample: int, samples: int) -> str:
    """``[cond]``, ``[s2]`` or ``[cond-s2]``; nothing without conditions and samples."""
    parts = [condition.name] if condition is not None else []
    if samples > 1:
        parts.append(f"s{sample + 1}")
    return f"[{'-'.join(parts)}]" if parts else ""


class SingleArticleFile(ArticleCollector):
    """An article file named on the command line outside any family folder."""

    def collect(self) -> Iterator[pytest.Item]:
        state = _state(self)
        try:
            self.family = state.single_family(self.path)
            self.plan = state.plan(self.family)
        except (SpecError, ValueError) as exc:
            raise self.CollectError(str(exc)) from None
        state.register_markers(self.family)
        self.article = self.family.articles[0]
        yield from super().collect()


def _with_fixture_subject(agenteval_subject: Any) -> Any:
    """What a scenario item "calls": pytest fills ``agenteval_subject`` at setup."""
    return agenteval_subject


def _with_spec_subject() -> None:
    """The same for ``--subject``: the plugin builds the subject, no fixture needed."""


class SubjectItem(pytest.Function):
    """An item about one scenario that the subject answers in setup: a graded
    scenario (:class:`ScenarioItem`) or a ``--pairwise`` comparison.

    A ``pytest.Function`` whose function takes the ``agenteval_subject``
    fixture: pytest's public fixture machinery then resolves the subject,
    autouse fixtures and finalizers exactly as for a test function, with no
    reach into pytest's private request objects.
    """

    def __init__(
        self,
        *,
        family: Family,
        plan: Plan,
        article: Article,
        scenario: Scenario,
        fixture_subject: bool = True,
        markers: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        callobj = _with_fixture_subject if fixture_subject else _with_spec_subject
        super().__init__(callobj=callobj, **kwargs)
        self.family = family
        self.plan = plan
        self.article = article
        self.scenario = scenario
        self.payload: dict[str, Any] | None = None
        for marker in ("agenteval", family.name, article.meta.pillar, *markers):
            self.add_marker(_mark(self.config, marker))

    def subject_fixture(self) -> Any:
        """pytest's own (public) setup of the fixtures; the ``agenteval_subject`` value
        (None with ``--subject``)."""
        state = _state(self)
        try:
            super().setup()
        except pytest.FixtureLookupError as exc:
            if getattr(exc, "argname", None) != "agenteval_subject":
                raise
            # a usage error, said once: stop after this item; nothing was called,
            # so there is no tree and no run directory (see AggregatorHooks.pytest_sessionfinish)
            state.stop_reason = "no subject"
            self.session.shouldstop = "agenteval: no subject (see the error above)"
            raise ItemError(NO_SUBJECT) from None
        return self.funcargs.get("agenteval_subject")

    #: What the item's location line adds after the scenario id (``[pairwise]``).
    report_suffix = ""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ItemError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        line = self.article.lines.get(self.scenario.id, 1)
        where = f"{self.family.name}::{self.scenario.id}{self.report_suffix}"
        return self.article.path, line - 1, where


class ScenarioItem(SubjectItem):
    """One scenario of one family, graded in setup, judged in runtest."""

    def __init__(
        self,
        *,
        family: Family,
        plan: Plan,
        article: Article,
        scenario: Scenario,
        sample: int = 0,
        condition: Condition | None = None,
        fixture_subject: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            family=family,
            plan=plan,
            article=article,
            scenario=scenario,
            fixture_subject=fixture_subject,
            markers=(scenario.severity or article.meta.severity,),
            **kwargs,
        )
        self.sample = sample
        self.condition = condition
        self.run: Any = None

    @cached_property
    def criteria(self) -> tuple[CriterionSpec, ...]:
        """The scenario's criteria as judges take them: made when first asked for, not at
        collection (every xdist worker collects every item and grades only its share)."""
        return criteria_from(self.scenario.evaluation_criteria)

    @property
    def severity(self) -> str:
        return self.scenario.severity or self.article.meta.severity

    def setup(self) -> None:
        grader = _state(self).grader
        if grader is None:  # an xdist controller runs no items
            raise RuntimeError(f"{self.nodeid}: this process does not grade")
        grader.grade(self, self.subject_fixture())

    def runtest(self) -> None:
        result = self.run.result
        if result.verdict == "fail":
            raise ScenarioFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            from .reports._terminal import failure_text

            return failure_text(self)
        return super().repr_failure(excinfo, style)

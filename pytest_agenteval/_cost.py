"""Tokens, cost and the budget that stops issuing calls.

Prices are US dollars per million tokens (input, output). The built-in table
covers common judge and subject models and can be overridden or extended
with the ini key ``agenteval_rates`` (one ``model = input output`` per line).
A model with no rate is counted in tokens and reported as "unknown rate",
never guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._vocab import AgentevalError

#: USD per 1M tokens (input, output). List prices at the time of writing; override in ini.
DEFAULT_RATES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o4-mini": (1.10, 4.40),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-opus-4-1": (15.00, 75.00),
}


class BudgetExceeded(AgentevalError):
    """The cost budget is reached: no further paid call; the item is not evaluated."""


#: How every refusal of the budget ends; the gate counts the items it stopped by it.
BUDGET_STOPPED = "not evaluated (--agenteval-max-cost)"


def stopped_by_budget(error: str | None) -> bool:
    """Was an item's *error* the budget's refusal of one of its calls?"""
    return bool(error) and BUDGET_STOPPED in str(error)


def parse_rates(lines: Iterable[str]) -> dict[str, tuple[float, float]]:
    """``model = input output`` lines (USD per 1M tokens) → a rate table."""
    rates: dict[str, tuple[float, float]] = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        model, sep, prices = line.partition("=")
        parts = prices.split()
        if not sep or len(parts) != 2:
            raise ValueError(f"agenteval_rates: expected 'model = input output', got {raw!r}")
        try:
            prices_in, prices_out = float(parts[0]), float(parts[1])
        except ValueError:
            prices_in = prices_out = math.nan
        if not all(math.isfinite(p) and p >= 0 for p in (prices_in, prices_out)):
            # a negative price would turn the budget off; NaN or infinity would poison it
            raise ValueError(
                "agenteval_rates: prices must be numbers of 0 or more (dollars per 1M tokens) "
                f"in {raw!r}"
            )
        rates[model.strip()] = (prices_in, prices_out)
    return rates


@dataclass(frozen=True)
class Cost:
    usd: float | None
    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "usd": self.usd,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def _rate(rates: Mapping[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    if model in rates:
        return rates[model]
    # dated snapshots ("gpt-4o-mini-2024-07-18") price like their family
    best = max((m for m in rates if model.startswith(m + "-")), key=len, default=None)
    return rates[best] if best else None


def rate_of(
    model: str | None, rates: Mapping[str, tuple[float, float]]
) -> tuple[float, float] | None:
    """*model*'s rate (``openai:gpt-4o-mini``, or the bare model name), None without one."""
    return _rate(rates, model.split(":", 1)[-1]) if model else None


def cost_of(model: str | None, usage: object, rates: Mapping[str, tuple[float, float]]) -> Cost:
    """What *usage* (``prompt_tokens``/``completion_tokens``, as a subject or a judge
    reported it; anything but a mapping counts as none) cost at *model*'s rate."""
    if not isinstance(usage, Mapping):
        usage = {}
    p = _tokens(usage.get("prompt_tokens"))
    c = _tokens(usage.get("completion_tokens"))
    if not p and not c:
        return Cost(0.0, 0, 0)
    rate = rate_of(model, rates)
    try:
        usd = None if rate is None else (p * rate[0] + c * rate[1]) / 1_000_000
    except OverflowError:  # a count beyond any float: more than any budget
        usd = math.inf
    return Cost(usd, p, c)


def _tokens(value: object) -> int:
    """A token count as an agent reported it; NaN, text or a negative count counts as 0.

    The reported value itself is kept in the evidence (``usage``); only the
    cost is computed from what can be read as a count.
    """
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and math.isfinite(value):
        return max(int(value), 0)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 0


def add(a: Mapping[str, object], b: Cost) -> dict[str, object]:
    """The total *a* (``usd``, ``prompt_tokens``, ``completion_tokens``, as this returns it)
    plus *b*; ``usd`` is None once a part of it had no known price."""
    usd_a, usd_b = a.get("usd", 0.0), b.usd
    return {
        "usd": None if usd_a is None or usd_b is None else float(_figure(usd_a)) + usd_b,
        "prompt_tokens": int(_figure(a.get("prompt_tokens", 0))) + b.prompt_tokens,
        "completion_tokens": int(_figure(a.get("completion_tokens", 0))) + b.completion_tokens,
    }


def _figure(value: object) -> str | int | float:
    """A figure of a total this module made (a number, or its text)."""
    if isinstance(value, str | int | float):
        return value
    raise TypeError(f"cost total: {type(value).__name__} is not a number")


def usd(amount: float) -> str:
    """*amount* in dollars, with cents, or the digits a smaller amount needs ($0.0003)."""
    return f"${amount:.2f}" if round(amount, 2) == amount else f"${amount:.6g}"


class Budget:
    """Spend so far in this process, and what its calls in flight are expected to cost.

    A paid call is announced first (:meth:`reserve`). Its expected cost is what the calls
    of the same model (the subject's, or a judge's) have cost on average so far, nothing
    before the first is priced; the calls in flight are expected to cost the same, at
    their model's average as it stands. A call is refused once what is spent reaches the
    limit, or would pass it with what the calls in flight and the call itself are
    expected to cost: the run stops starting calls before the budget is spent, not after,
    and passes it only by what the calls in flight cost beyond their model's average, or,
    before a model's first call is priced, by the first calls in flight (up to the
    concurrency).
    """

    def __init__(self, limit_usd: float | None, *, of_run: float | None = None) -> None:
        self.limit = limit_usd
        #: The run's whole budget, when *limit_usd* is one xdist worker's share of it.
        self.of_run = of_run
        self.spent = 0.0
        #: a call was refused: this process's budget (an xdist worker's share) is used up
        self.refused = False
        self._open: dict[str, int] = {}  # model -> its paid calls in flight
        self._priced: dict[str, tuple[float, int]] = {}  # model -> (dollars, calls) so far
        self._lock = threading.Lock()
        #: paid calls cancelled in flight so far: (how many, usd at average, unpriced)
        self._stopped: tuple[int, float, int] = (0, 0.0, 0)
        #: an xdist worker's ledger of its calls in flight and its spend (:class:`Ledger`)
        self.ledger: Ledger | None = None

    def _note(self) -> None:
        """The ledger's line, after each change (under the lock)."""
        if self.ledger is not None:
            self.ledger.write(*self._open_now(), self.spent)

    def expected(self, model: str | None) -> float:
        """What a call of *model* is expected to cost: its calls' average so far, else 0."""
        dollars, calls = self._priced.get(model or "", (0.0, 0))
        return dollars / calls if calls else 0.0

    def in_flight(self) -> float:
        """What the paid calls in flight are expected to cost, at their models' averages."""
        return sum(n * self.expected(model) for model, n in self._open.items() if n)

    def check(self, expected: float = 0.0) -> None:
        """Refuse a call (:class:`BudgetExceeded`) expected to cost *expected* once the
        limit is reached by what is spent, or would be passed with what the calls in flight
        and this one are expected to cost."""
        if self.limit is None:
            return
        ahead = self.in_flight() + expected
        within = not ahead or (math.isfinite(ahead) and self.spent + ahead <= self.limit)
        if self.spent < self.limit and within:
            return
        self.refused = True
        whose = (
            f"this worker's share {usd(self.limit)} of the run's budget {usd(self.of_run)}"
            if self.of_run is not None and self.of_run != self.limit
            else f"budget of {usd(self.limit)}"
        )
        if self.spent >= self.limit:
            raise BudgetExceeded(
                f"cost {whose} reached (spent ${self.spent:.4f}); {BUDGET_STOPPED}"
            )
        raise BudgetExceeded(
            f"cost {whose} reached: {usd(self.spent)} spent, and the calls in flight with this "
            f"one are expected to cost {usd(ahead)} more (at what their models' calls cost so "
            f"far); {BUDGET_STOPPED}"
        )

    def _free(self, model: str) -> bool:
        """Were *model*'s calls priced so far, all at nothing?"""
        dollars, calls = self._priced.get(model, (0.0, 0))
        return bool(calls) and not dollars

    def open_calls(self) -> tuple[int, float, int]:
        """The paid calls in flight, and those cancelled in flight so far: (how many, what
        the priced ones are expected to cost at their models' averages, how many are of a
        model not priced yet). At the end of a run: cancelled with it (-x, Ctrl-C, the
        budget), or abandoned at the timeout and still running; no record holds what they
        cost, and a provider may bill them."""
        with self._lock:
            return self._open_now()

    def _open_now(self) -> tuple[int, float, int]:
        open_ = {m: n for m, n in self._open.items() if n > 0 and not self._free(m)}
        unpriced = sum(n for model, n in open_.items() if not self._priced.get(model))
        usd = sum(n * self.expected(model) for model, n in open_.items())
        calls, was_usd, was_unpriced = self._stopped
        return sum(open_.values()) + calls, usd + was_usd, unpriced + was_unpriced

    def _cancelled(self, bill: Bill) -> None:
        """A paid call cancelled in flight (before the run's end counts what is open): it
        counts with those, at its model's average as it stands."""
        with self._lock:
            if bill.paid and not self._free(bill.model):
                calls, usd, unpriced = self._stopped
                priced = bool(self._priced.get(bill.model))
                self._stopped = (
                    calls + 1,
                    usd + self.expected(bill.model),
                    unpriced + (not priced),
                )

    def reserve(self, model: str | None, *, paid: bool = True) -> Bill:
        """Before a call of *model*: counted in flight, or refused with
        :class:`BudgetExceeded`. Settle the :class:`Bill` with what the call cost; one
        left unsettled (the call failed) spends nothing. A call that is not *paid* (a
        deterministic judge, a local model), or of a model whose calls so far cost nothing,
        is never refused nor counted in flight; what it reports it cost is still spent."""
        key = model or ""
        if self._free(key):  # its calls so far cost nothing (a Python subject that reports
            paid = False  # no usage): nothing to stop it for (a paid judge's still count)
        if paid:
            with self._lock:
                self.check(self.expected(key))
                self._open[key] = self._open.get(key, 0) + 1
                self._note()
        return Bill(self, key, paid)

    def refuse_if_spent(self, model: str | None) -> None:
        """Before a call that is not counted as paid (a Python subject naming no priced
        model): refused all the same (:class:`BudgetExceeded`) once the budget is spent,
        unless its model's calls so far cost nothing; it may report a paid API's usage."""
        if not self._free(model or ""):
            with self._lock:
                self.check(0.0)

    def charge(self, cost: Cost) -> None:
        """What a call that was not announced cost (a batch's answers)."""
        if cost.usd:
            with self._lock:
                self.spent += cost.usd
                self._note()

    def _settle(self, bill: Bill, cost: Cost | None) -> None:
        with self._lock:
            # spent first, then out of those in flight: a Ctrl-C raised in between (it may
            # land on any line) counts the call twice rather than not at all
            if cost is not None and cost.usd is not None:  # else failed, or without a rate
                self.spent += cost.usd
                if math.isfinite(cost.usd):
                    total, calls = self._priced.get(bill.model, (0.0, 0))
                    self._priced[bill.model] = (total + cost.usd, calls + 1)
            if bill.paid:
                self._open[bill.model] -= 1
            self._note()


@dataclass
class Wire:
    """What one paid call put on the wire, as the provider connections' HTTP hooks saw it:
    requests started, those on the wire now (headers sent, no status read yet, not failed
    by themselves), those the run stopped after they were sent (inside a traced step),
    those whose answer was lost once they went out whole (a connection closed under
    them), and those answered with a success status (billed, whether or not the call gets
    to read it). All but the first count only for a call the run stops: a call that
    fails by itself counts as costing nothing, as it always did."""

    requests: int = 0
    on_wire: int = 0
    cut_off: int = 0
    lost: int = 0
    answered: int = 0

    def may_bill(self) -> bool:
        """Stopped now, might a provider bill this call? Yes once a request went out whole
        or may have, unless each that did was answered with an error status."""
        return bool(self.on_wire or self.cut_off or self.lost or self.answered)


#: The wire of the :class:`Bill` open in this context (its call's requests count here)
WIRE: contextvars.ContextVar[Wire | None] = contextvars.ContextVar("agenteval_wire", default=None)


class Bill:
    """One call announced to the :class:`Budget`; a context manager that, on leaving,
    takes the call out of those in flight unless :meth:`charge` settled it."""

    def __init__(self, budget: Budget, model: str, paid: bool) -> None:
        self.budget = budget
        self.model = model
        self.paid = paid
        self._settled = False
        self._wire: Wire | None = None
        self._token: contextvars.Token[Wire | None] | None = None

    def charge(self, cost: Cost) -> None:
        """Settle with what the call cost (once; a second settlement does nothing)."""
        if not self._settled:
            self._settled = True
            self.budget._settle(self, cost)

    def charge_used(self, cost: Cost) -> None:
        """A judge's call: settled with *cost* when the provider reported the tokens it
        used, else released (a failed call, which priced at nothing would make a paid
        judge look free and drag its average down). Released with a request cut off on
        its way (its judge's deadline stopped it), it counts with the calls cancelled in
        flight: the provider got it, and may bill it."""
        if cost.prompt_tokens or cost.completion_tokens:
            self.charge(cost)
            return
        if not self._settled and self._wire is not None and self._wire.cut_off:
            self.budget._cancelled(self)
        self.release()

    def release(self) -> None:
        """The call failed: out of those in flight, nothing spent."""
        if not self._settled:
            self._settled = True
            self.budget._settle(self, None)

    def __enter__(self) -> Bill:
        self._wire = Wire()
        self._token = WIRE.set(self._wire)
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._token is not None:
            with contextlib.suppress(ValueError):  # left in another context: nothing to undo
                WIRE.reset(self._token)
            self._token = None
        if not self._settled and kind is not None and issubclass(kind, _CANCELLED):
            wire = self._wire
            # sent, maybe answered: a provider may bill it; unless the connections saw its
            # requests and none was on its way or answered (a refused connection, a wait to
            # retry). A call they did not see (a Python subject's own client) may have been
            # sent. One whose answer came (before it was charged), or was lost under it
            # (the run's shutdown closing the clients), may have been billed too.
            if wire is None or not wire.requests or wire.may_bill():
                self.budget._cancelled(self)
        self.release()


#: How a call in flight is stopped by the run (-x, Ctrl-C, the budget, the run's end).
_CANCELLED = (asyncio.CancelledError, KeyboardInterrupt)


def payload_usd(
    payload: Mapping[str, Any], rates: Mapping[str, tuple[float, float]]
) -> float | None:
    """The dollars one report's record cost (None: a model without a rate); a calibration
    grade's from its judge's tokens (a batch's at the batch price)."""
    cost = payload.get("cost")
    if isinstance(cost, Mapping):
        total = cost.get("total")
        usd = total.get("usd") if isinstance(total, Mapping) else None
        if usd is None and isinstance(total, Mapping) and (total.get("prompt_tokens") or 0):
            return None
        return float(usd) if isinstance(usd, (int, float)) and not isinstance(usd, bool) else 0.0
    meta = payload.get("judge_meta")
    if not isinstance(meta, Mapping):
        return 0.0
    from .judges._batch import grade_cost

    return grade_cost(meta, payload.get("judge"), rates).usd


class Ledger:
    """An xdist worker's account, kept in a small file the controller reads when the worker
    ends without handing it over (it crashed, or Ctrl-C stopped the run): its paid calls in
    flight (:meth:`Budget.open_calls`) and what it spent, as it hands them over at its end.

    One fixed-size line, rewritten in place at every change (a system call; no fsync: the
    controller reads it on the same host, and a worker killed mid-write leaves the old
    line or the new one). A worker on another host (``--tx ssh=...``) finds no ledger
    folder there and keeps none."""

    SIZE = 128

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # an account from the start: a worker that dies before its first paid call kept a
        # ledger all the same (an empty file read as none: "how many is not known")
        self.write(0, 0.0, 0, 0.0)

    @classmethod
    def open(cls, path: str) -> Ledger | None:
        """The ledger at *path*, or None when its folder is not on this host."""
        where = Path(path)
        if not where.parent.is_dir():
            return None
        try:
            return cls(where)
        except OSError:
            return None

    def write(self, calls: int, usd: float, unpriced: int, spent: float) -> None:
        line = f"{calls} {usd!r} {unpriced} {spent!r}\n".encode().ljust(self.SIZE)
        with contextlib.suppress(OSError):  # a full disk: the account is then not known
            os.pwrite(self.fd, line[: self.SIZE], 0)

    @staticmethod
    def read(path: Path) -> tuple[int, float, int, float] | None:
        """(calls in flight, their usd at average, unpriced, spent) as last written, or None
        when there is no readable ledger."""
        try:
            fields = path.read_bytes().split()
            calls, usd, unpriced, spent = (
                int(fields[0]),
                float(fields[1]),
                int(fields[2]),
                float(fields[3]),
            )
        except (OSError, ValueError, IndexError):
            return None
        if len(fields) != 4 or not all(
            math.isfinite(x) and x >= 0 for x in (calls, usd, unpriced, spent)
        ):
            return None
        return calls, usd, unpriced, spent


def unheld_usd(spent: float, held: float) -> float:
    """What a process's budget counted as spent beyond what its records hold (0 when no
    more than a float sum's noise: the two add the same costs in other orders)."""
    beyond = spent - held
    return beyond if beyond > 1e-9 + 1e-9 * abs(spent) else 0.0


#: The key of a worker's budget in xdist's ``workerinput``.
WORKER_BUDGET = "agenteval_budget"
#: The key of a worker's ledger file in xdist's ``workerinput`` (see :class:`Ledger`).
WORKER_LEDGER = "agenteval_ledger"


class WorkerShares:
    """The run's budget divided across xdist workers (the controller's account of it).

    Each of the first workers gets an equal share. A worker that crashes is replaced by
    xdist; its replacement gets what the crashed one had left by the spend its reports
    showed, not a fresh share, so restarts cannot spend the budget again. What the crashed
    worker had spent and not yet reported is not known here: the calls it had in flight,
    and those it had made ahead of the item it ran (up to its look-ahead window), so a
    replacement may pass the run's budget by as much.
    """

    def __init__(self, total: float | None) -> None:
        self.total = total
        self.budgets: dict[str, float] = {}  # worker id -> what it was given
        self.spent: dict[str, float] = {}  # worker id -> its reported spend
        self._left: list[float] = []  # what crashed workers had left, for replacements

    def assign(self, worker: str, workers: int) -> float | None:
        """The budget of a worker being started, one of *workers* (None: no budget)."""
        if self.total is None:
            return None
        if len(self.budgets) < max(1, workers):
            budget = self.total / max(1, workers)
        else:
            budget = self._left.pop(0) if self._left else 0.0
        self.budgets[worker] = budget
        return budget

    def spend(self, worker: str, usd: float) -> None:
        self.spent[worker] = self.spent.get(worker, 0.0) + usd

    def crashed(self, worker: str) -> None:
        if worker in self.budgets:
            self._left.append(max(0.0, self.budgets[worker] - self.spent.get(worker, 0.0)))

"""The garbage collector while a run of benchmark items alone runs.

Such a run allocates a few hundred containers per item (the request, the
answer, the record, pytest's reports) and keeps the modules, the SDK and every
item alive to the end. CPython's collector, left as it is, walks those again
and again: at 3,000 items with an instant judge its passes took 1.2 s of a
15 s run, the young generations alone 0.6 s in 800 passes. Two documented
settings of the ``gc`` module take most of that away:

* :func:`gc.freeze` once the items are collected, and again when they start
  (after the judges' SDK was imported): what exists then (the modules, the SDK,
  the items and their scenarios) is left out of every full pass, pytest's own
  passes at the end of the session included;
* generation 0's threshold raised to :data:`YOUNG_THRESHOLD` allocations
  (from CPython's 700): a record's short-lived containers are mostly freed by
  their reference counts before any pass walks them.

Together: 1.1-1.2 s -> 0.4 s of collector time at 3,000 items (``gc.callbacks``; the
young passes 825 -> 116, the full ones 8 -> 3, all of them cheap).

Both are undone by :meth:`QuietCollector.stop`, a cleanup of the session that
runs after pytest's own last collections (it is registered before them), so
a host that calls ``pytest.main()`` gets its interpreter back as it was, and
the interpreter's exit collections finalize everything: nothing an object
still buffers is lost. A session with any other test keeps the interpreter as
it is, and so does one where something (a conftest) froze objects already; a
threshold set higher than ours is kept.

The price, kept small on purpose: an object made before the items ran (a
conftest's global, say) that the run drops in a reference cycle is garbage
pytest's last collection does not see. It is finalized once the session has
given the collector back (at the next collection, at the latest when the
interpreter exits), so its ``__del__`` still runs, but an exception there is
shown as Python's "Exception ignored in" on stderr rather than as pytest's
unraisable-exception warning. Objects made while the items run (fixtures,
the agent's) are not frozen and are collected as always.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "QuietCollector"]

#: Generation 0's collection threshold while the items run (CPython 3.10-3.12: 700;
#: 3.13: 2,000). 10,000 kept young passes to a seventh at 3,000 items; 50,000 saved
#: little more.
YOUNG_THRESHOLD = 10_000


class QuietCollector:
    """Freezes what lives to the end and raises the young threshold, once; undoes both."""

    def __init__(self) -> None:
        self._frozen = False
        self._thresholds: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # before, set

    def start(self) -> None:
        """Quieten the collector for the run (once)."""
        if self._frozen or gc.get_freeze_count():  # objects frozen already: someone's choice
            return
        self._frozen = True
        before = gc.get_threshold()
        if before[0] < YOUNG_THRESHOLD:
            ours = (YOUNG_THRESHOLD, *before[1:])
            gc.set_threshold(*ours)
            self._thresholds = (before, ours)
        gc.freeze()

    def freeze_since(self) -> None:
        """Once quietened: freeze what was made since (an SDK imported, a subject built)."""
        if self._frozen:
            gc.freeze()

    def stop(self) -> None:
        """The interpreter as it was: unfrozen, and the threshold back unless changed since."""
        if self._frozen:
            self._frozen = False
            gc.unfreeze()
        if self._thresholds is not None:
            before, ours = self._thresholds
            self._thresholds = None
            if gc.get_threshold() == ours:
                gc.set_threshold(*before)

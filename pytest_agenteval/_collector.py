"""The garbage collector while a run of benchmark items alone runs.

Such a run allocates a few hundred containers per item (the request, the
answer, the record, pytest's reports) and keeps the modules, the SDK and every
item alive to the end. CPython's collector, left as it is, walks those again
and again: at 3,000 items with an instant judge its passes took 1.2 s of a
15 s run, the young generations alone 0.6 s in 800 passes. Two documented
settings of the ``gc`` module take most of that away:

* :func:`gc.freeze` once the items are collected, and again when they start
  (after the judges' SDK was imported): what exists then (the modules, the SDK,
  the items and their scenarios) is left out of the collector's passes while
  the items run;
* generation 0's threshold raised to :data:`YOUNG_THRESHOLD` allocations
  (from CPython's 700): a record's short-lived containers are mostly freed by
  their reference counts before any pass walks them.

Together: 1.1-1.2 s -> 0.4 s of collector time at 3,000 items (``gc.callbacks``; the
young passes 825 -> 116, the full ones 8 -> 3, all of them cheap).

At the end, first thing in ``pytest_unconfigure`` and before pytest's own
collections (pytest 8.4 to 9.0 make one in a cleanup, 9.1 and later one in
``pytest_unconfigure`` too), :meth:`QuietCollector.thaw` unfreezes
everything: those passes look for exceptions raised in finalizers (``-W error``
turns one into a failed run) and must see every object the run dropped, frozen
or not, as without this plugin (a test holds that they do). Last thing in
``pytest_unconfigure``, :meth:`QuietCollector.refreeze` freezes what survived
again, but only when a full pass ran in between (pytest 9.1+'s, or anyone's
``gc.collect()``: generation 2's count in :func:`gc.get_stats` tells): pytest's
pass in its cleanup then walks only what is new. One full pass at the end
instead of two, some 50 ms each at 200 items; with no pass in between (pytest
8.4 to 9.0, or pytester in-process, which turns them off) the next pass sees
everything, as before. The plugin makes no pass of its own: one made the
in-process sessions of this project's tests finalize, and report as theirs,
files that other tests of the same process had left unclosed. A cleanup, run
after pytest's own, undoes the freeze and the threshold
(:meth:`QuietCollector.stop`; it runs even when ``pytest_unconfigure`` is not
reached), so the interpreter's collection at exit sees everything, and a host
that calls ``pytest.main()`` gets its interpreter back as it was. (Keeping
everything frozen through pytest's passes hid a cycle made before the items
and dropped during them: its ``__del__`` error no longer failed a ``-W error``
run.)

Left alone: a session with any other test, ``--collect-only``, a collector a
conftest froze already or turned off (``gc.disable()``, or a threshold of 0),
and a threshold set higher than ours. A threshold changed during the run is
kept as changed. What remains different while the items run: an object made
before them and dropped in a reference cycle is reclaimed only at the end, not
by a ``gc.collect()`` during the run; and any object alive at pytest's pass in
``pytest_unconfigure`` and dropped in a reference cycle after it (in a
``trylast`` ``pytest_unconfigure``, or a cleanup that runs before pytest's) is
frozen again with the survivors and escapes pytest's pass in its cleanup: the
interpreter's collection at exit finalizes it, and an error in its ``__del__``
is printed there ("Exception ignored"), not turned into a warning that
``-W error`` makes a failed run (a test holds that it is finalized and shown); and
:func:`gc.unfreeze` at the end also releases what the run's own code froze.
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
        self._young: int | None = None  # generation 0's threshold before ours
        self._full_passes: int | None = None  # generation 2's collections at thaw()

    def start(self) -> None:
        """Quieten the collector for the run (once)."""
        if self._frozen or gc.get_freeze_count():  # objects frozen already: someone's choice
            return
        if not gc.isenabled() or gc.get_threshold()[0] == 0:  # the collector turned off
            return
        self._frozen = True
        young, *older = gc.get_threshold()
        if young < YOUNG_THRESHOLD:
            gc.set_threshold(YOUNG_THRESHOLD, *older)
            self._young = young
        gc.freeze()

    def freeze_since(self) -> None:
        """Once quietened: freeze what was made since (an SDK imported, a subject built)."""
        if self._frozen:
            gc.freeze()

    def thaw(self) -> None:
        """At the end, before pytest's own passes: everything unfrozen, so that they see all
        the run dropped; the count of full passes so far kept for :meth:`refreeze`."""
        if self._frozen:
            self._full_passes = _full_passes()
            gc.unfreeze()

    def refreeze(self) -> None:
        """After ``pytest_unconfigure``'s hooks: when a full pass ran since :meth:`thaw`
        (pytest 9.1+ makes one there), what survived it frozen again until :meth:`stop`,
        so that the passes still to come (pytest's cleanup's) walk only what is new.
        With no full pass since, nothing: the next one must see everything."""
        if self._full_passes is not None:  # set by thaw() only while frozen by us
            if _full_passes() > self._full_passes:
                gc.freeze()
            self._full_passes = None

    def stop(self) -> None:
        """The interpreter as it was: unfrozen, and generation 0's threshold back unless
        changed since (generations 1 and 2 are never touched). Idempotent."""
        if self._frozen:
            self._frozen = False
            self._full_passes = None
            gc.unfreeze()
        if self._young is not None:
            before, self._young = self._young, None
            now = gc.get_threshold()
            if now[0] == YOUNG_THRESHOLD:  # not changed since: generation 0's as it was
                gc.set_threshold(before, *now[1:])


def _full_passes() -> int:
    """How many times generation 2 was collected (every full pass: automatic, or gc.collect())."""
    return int(gc.get_stats()[2]["collections"])

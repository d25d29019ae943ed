"""The stash keys of the run: importable without pulling in pydantic, YAML or a role module."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._pairwise_run import PairwiseRun
    from ._session import AgentevalState

STATE: pytest.StashKey[AgentevalState] = pytest.StashKey()
#: set only by ``--pairwise``: a plain benchmark run never imports the pairwise modules
PAIRWISE: pytest.StashKey[PairwiseRun] = pytest.StashKey()

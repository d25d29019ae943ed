"""The stash key of the run state: importable without pulling in pydantic or YAML."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._session import AgentevalState

STATE: pytest.StashKey[AgentevalState] = pytest.StashKey()

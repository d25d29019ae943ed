"""Conditions: named contexts the subject runs under, compared in one run (k-eval).

A condition is a name and an optional system prompt file given to the
subject (MCP servers, the other half of a k-eval condition, are not wired
here and are recorded as none). With conditions configured, every scenario
runs once per condition (× samples); each condition gets its own tree, gate
and run directory, so ``baseline`` and ``with-policy`` can be compared on
the same scenarios. Without conditions nothing changes.

Declared as ini lines ``agenteval_conditions = NAME = [FILE]`` or on the
command line ``--condition=NAME[=FILE]``; paths are relative to the rootdir.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ConditionError(ValueError):
    pass


@dataclass(frozen=True)
class Condition:
    name: str
    system: str | None = None
    file: str | None = None

    def describe(self) -> dict[str, Any]:
        """What the manifest records (the prompt's hash, not its text)."""
        return {
            "name": self.name,
            "system_prompt_file": self.file,
            "system_prompt_sha256": None
            if self.system is None
            else hashlib.sha256(self.system.encode("utf-8")).hexdigest(),
            "mcp_servers": [],
        }

    def system_for(self, scenario_system: str | None) -> str | None:
        """The condition's system prompt first, then the scenario's own, if any."""
        parts = [p for p in (self.system, scenario_system) if p]
        return "\n\n".join(parts) if parts else None


def parse_conditions(specs: Iterable[str], base: Path) -> list[Condition]:
    """``NAME`` or ``NAME=FILE`` (or the ini's ``NAME = FILE``) → conditions, in order."""
    found: dict[str, Condition] = {}
    for raw in specs:
        spec = raw.split("#", 1)[0].strip()
        if not spec:
            continue
        name, _, file = (part.strip() for part in spec.partition("="))
        if not _NAME.match(name):
            raise ConditionError(
                f"condition name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)"
            )
        if name in found:
            raise ConditionError(f"condition {name!r} is declared twice")
        system = None
        if file:
            path = Path(file) if Path(file).is_absolute() else base / file
            try:
                system = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConditionError(
                    f"condition {name!r}: cannot read system prompt {file!r} ({exc.strerror or exc})"
                ) from None
        found[name] = Condition(name, system, file or None)
    return list(found.values())

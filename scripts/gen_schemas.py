"""Write the JSON Schemas of summary.json, results.jsonl lines and calibration.json.

They are generated from the typed models in ``pytest_agenteval/_model.py`` and
shipped in ``pytest_agenteval/schemas/``; ``tests/test_schemas.py`` fails when
the shipped files differ from what this script writes.

    python scripts/gen_schemas.py
"""

from __future__ import annotations

from pytest_agenteval._model import SCHEMA_DIR, render_schemas


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, text in render_schemas().items():
        (SCHEMA_DIR / name).write_text(text)
        print(f"wrote {SCHEMA_DIR.name}/{name}")


if __name__ == "__main__":
    main()

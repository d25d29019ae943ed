"""Short error texts that show the user's code, not pytest's or ours.

A subject or fixture that raises should read like a test failure in the
user's own code: the exception, then the frames of their files (at most a
few, innermost last). Frames inside pytest, pluggy, asyncio, threading,
importlib and this package are left out; if nothing else is left, the innermost frames
are shown as they are, so a bug of ours is never hidden.
"""

from __future__ import annotations

import traceback
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_HIDDEN_PARTS = (
    "_pytest",
    "pluggy",
    "asyncio",
    "concurrent",
    "threading.py",
    "execnet",
    "xdist",
    "importlib",  # a module that raises as it is imported: its frame, not the machinery's
)
MAX_FRAMES = 4


def _hidden(filename: str) -> bool:
    path = Path(filename)
    try:
        if path.resolve().is_relative_to(_PACKAGE_DIR):
            return True
    except (OSError, ValueError):
        pass
    return any(part in filename for part in _HIDDEN_PARTS) or filename.startswith("<")


def shown_path(filename: str, rootdir: Path | None) -> str:
    """*filename* relative to *rootdir* when it is under it, else as it is."""
    if rootdir is not None:
        try:
            return Path(filename).resolve().relative_to(rootdir.resolve()).as_posix()
        except (OSError, ValueError):
            pass
    return filename


def describe_exception(exc: BaseException, rootdir: Path | None = None) -> str:
    """``Type: message`` and the innermost frames of the user's code."""
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if not _hidden(f.filename)] or list(frames)
    lines = [head]
    for frame in mine[-MAX_FRAMES:]:
        lines.append(f"  {shown_path(frame.filename, rootdir)}:{frame.lineno} in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    return "\n".join(lines)

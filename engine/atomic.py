"""Atomic file writes: write to a temporary file beside the target, then rename over it.

A failing write (read-only folder, full disk, a file where a folder should be) raises
ExportError with one line saying what and where; the target is never left half-written and no
temporary file is left behind.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .errors import NagareError


class ExportError(NagareError):
    pass


def write_atomic(path: str | Path, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)`` then rename tmp → path. Returns the final path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer(tmp)
        os.replace(tmp, path)
    except BaseException as exc:  # also Ctrl-C mid-write: no temporary file left behind
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))

"""Persistent tuning results: one JSON file in the user's cache folder.

Key = (GPU name, kernel, problem shape, dtype, options); value = the settled configuration, its
time and when it was measured. Writes are atomic (unique temp file in the same folder + rename)
and merge with what another process may have written meanwhile, so concurrent runs never leave
a torn file; an unreadable file is treated as empty (a cache only costs a re-tune when lost).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..atomic import ExportError, output_writer, write_text_atomic
from ..device import cache_dir

FILE_NAME = "autotune.json"
FORMAT = 1


def tune_key(gpu: str, kernel: str, shape, dtype, options=()) -> str:
    """A readable, stable key; ``options`` is any JSON-able value (sorted when a dict)."""
    opts = json.dumps(options, sort_keys=True, default=str, separators=(",", ":"))
    shape_txt = "x".join(str(int(n)) for n in shape)
    return f"{gpu}|{kernel}|{shape_txt}|{np.dtype(dtype).name}|{opts}"


@output_writer("the auto-tuner's cache")
class TuneCache:
    def __init__(self, path: Path):
        self.path = Path(path)

    def load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return {}
        entries = data.get("entries", {})
        return entries if isinstance(entries, dict) else {}

    def get(self, key: str) -> dict | None:
        return self.load().get(key)

    def put(self, key: str, config: dict, ms: float, **info) -> None:
        entries = self.load()
        entries[key] = {"config": config, "ms": ms, "measured": time.strftime("%Y-%m-%dT%H:%M:%S"), **info}
        self._write(entries)

    def remove(self, match: str = "") -> int:
        """Drop entries whose key contains ``match`` (all when empty); returns how many."""
        entries = self.load()
        keep = {k: v for k, v in entries.items() if match and match not in k}
        removed = len(entries) - len(keep)
        if removed:
            self._write(keep)
        return removed

    def _write(self, entries: dict) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True))
        except (OSError, ExportError):
            pass  # a read-only cache folder only costs a re-tune next run


def default_cache() -> TuneCache:
    return TuneCache(cache_dir() / FILE_NAME)

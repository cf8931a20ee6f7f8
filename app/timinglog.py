"""Timing logs: one CSV row per measured batch, and a JSON file with metadata and the same rows.

CSV columns: wall_time, step, steps_measured, engine, variant, phase_<name>_ms (per step, one
column per phase), ms_per_step, updates_per_s, gbytes_per_s, roofline_pct.
"""
from __future__ import annotations

import csv
import io
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from nagare.engine.presets import raw_dict

from nagare import __version__

from .atomic import write_text_atomic


def variant_label(selection: dict) -> str:
    return ";".join(f"{k}={v}" for k, v in selection.items())


def run_metadata(engine, argv: list[str] | None = None) -> dict:
    info = engine.backend.device_info()
    meta = {
        "nagare": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command_line": " ".join(argv if argv is not None else sys.argv),
        "engine": engine.family,
        "preset_source": engine.preset.source,
        "preset_hash": engine.preset.content_hash,
        "preset": raw_dict(engine.preset),
        "backend": engine.backend.name,
        "device": info.as_dict(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "roofline_bytes_per_s": engine.roofline_bytes_per_s(),
        "bytes_per_update": engine.bytes_per_update(),
        "updates_per_step": engine.updates_per_step,
    }
    return meta


class TimingLog:
    """Collects rows in memory; ``write(path)`` writes .csv or .json atomically (both if asked)."""

    def __init__(self, engine, argv: list[str] | None = None):
        self.engine = engine
        self.meta = run_metadata(engine, argv)
        self.rows: list[dict] = []
        self.phases: list[str] = []

    def record(self, wait: bool = False) -> dict | None:
        rep = self.engine.batch_report(wait=wait)
        if rep.steps == 0:
            return None
        for ph in rep.phase_ms_per_step:
            if ph not in self.phases:
                self.phases.append(ph)
        row = {
            "wall_time": round(time.time(), 3),
            "step": self.engine.step_count,
            "steps_measured": rep.steps,
            "engine": self.engine.family,
            "variant": variant_label(self.engine.selection),
            **{f"phase_{k}_ms": v for k, v in rep.phase_ms_per_step.items()},
            "ms_per_step": rep.ms_per_step,
            "updates_per_s": rep.updates_per_s,
            "gbytes_per_s": rep.gbytes_per_s,
            "roofline_pct": None if rep.roofline_fraction is None else 100 * rep.roofline_fraction,
        }
        self.rows.append(row)
        return row

    def columns(self) -> list[str]:
        return (["wall_time", "step", "steps_measured", "engine", "variant"]
                + [f"phase_{p}_ms" for p in self.phases]
                + ["ms_per_step", "updates_per_s", "gbytes_per_s", "roofline_pct"])

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns(), extrasaction="ignore")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in self.columns()})
        return buf.getvalue()

    def json_text(self) -> str:
        return json.dumps({"metadata": self.meta, "columns": self.columns(), "rows": self.rows}, indent=1)

    def write(self, path: str | Path) -> list[Path]:
        """Write ``path`` (.csv or .json) and its sibling of the other kind."""
        path = Path(path)
        stem = path.name[: -len(path.suffix)] if path.suffix.lower() in (".csv", ".json") else path.name
        return [write_text_atomic(path.with_name(stem + ".csv"), self.csv_text()),
                write_text_atomic(path.with_name(stem + ".json"), self.json_text())]

"""Timing logs, streamed to disk: one CSV row per measured batch, and a JSON file with metadata
and the same rows.

CSV columns: wall_time, step, steps_measured, engine, variant, phase_<name>_ms (per step, one
column per phase), ms_per_step, updates_per_s, gbytes_per_s, roofline_pct.

JSON: ``{"metadata": {...}, "rows": [{...}, ...], "columns": [...]}`` — one document, one row per
line. Rows go to disk as they are recorded (nothing is kept in memory, so a run of days stays
small): the CSV is appended to, and the JSON's closing ``], "columns": [...]}`` is rewritten after
each row, so both files are complete and readable at every moment of the run (``json.load``,
``csv.DictReader``), and a killed run keeps every row up to its last batch. A phase that first
appears mid-run (a variant switch in the app) adds its CSV column by rewriting the header once.

``TimingLog(engine, argv, path)`` streams straight into ``path`` (the .csv/.json pair);
without a path (the app) it streams into a private spool folder and ``write(path)`` copies it out;
with ``spool=False`` and no path it keeps nothing (a headless run without ``--timings``).
"""
from __future__ import annotations

import csv
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from nagare.engine.presets import raw_dict

from nagare import __version__

from .atomic import ExportError, make_folder, write_atomic

TIMING_SUFFIXES = (".csv", ".json")


def variant_label(selection: dict) -> str:
    return ";".join(f"{k}={v}" for k, v in selection.items())


def timing_paths(path: str | Path) -> tuple[Path, Path]:
    """``t.csv`` or ``t.json`` → (t.csv, t.json). Any other suffix is a ValueError (one line)."""
    path = Path(path)
    if path.suffix.lower() not in TIMING_SUFFIXES:
        raise ValueError(f"expected FILE.csv or FILE.json (the pair FILE.csv + FILE.json is written), "
                         f"not a '{path.suffix or 'no'}' suffix")
    stem = path.name[: -len(path.suffix)]
    return path.with_name(stem + ".csv"), path.with_name(stem + ".json")


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
        "device_description": info.describe(),
        "device": info.as_dict(),
        # the selection the log began with (the app may switch later: each row's "variant" says)
        "variants": dict(engine.selection),
        "variant": variant_label(engine.selection),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "roofline_bytes_per_s": engine.roofline_bytes_per_s(),
        "bytes_per_update": engine.bytes_per_update(),
        "updates_per_step": engine.updates_per_step,
    }
    return meta


def _csv_line(values: list) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue().encode("utf-8")


class TimingLog:
    """Streams rows to a .csv/.json pair as they are recorded; memory stays bounded.

    ``record()`` never raises: a write that fails (full disk) sets ``error`` (one line) and stops
    the streaming; the rows already written stay. ``write(path)`` returns the files written and
    raises ExportError when they cannot be.
    """

    def __init__(self, engine, argv: list[str] | None = None, path: str | Path | None = None,
                 spool: bool = True):
        self.engine = engine
        self.meta = run_metadata(engine, argv)
        self.phases: list[str] = []
        self.quantities: list[str] = []  # engine.logged_quantities() columns, in order of appearance
        self.count = 0  # rows recorded
        self.last_row: dict | None = None
        self.error: str | None = None
        self._spool = None
        self._csv = self._json = None
        self._json_end = 0  # where the JSON's closing part starts
        self.csv_path = self.json_path = None
        if path is None and not spool:  # rows are only summarised (a run without --timings)
            return
        if path is None:
            self._spool = tempfile.TemporaryDirectory(prefix="nagare-timings-")
            path = Path(self._spool.name) / "timings.csv"
        self.csv_path, self.json_path = timing_paths(path)
        try:
            make_folder(self.csv_path.parent)
            for p in (self.csv_path, self.json_path):  # opening a FIFO for writing blocks forever
                if p.exists() and not p.is_file():
                    raise OSError(21, f"{p} exists and is not a regular file")
            self._csv = open(self.csv_path, "wb")
            self._csv.write(_csv_line(self.columns()))
            self._csv.flush()
            self._json = open(self.json_path, "w+b")
            head = json.dumps({"metadata": self.meta}, indent=1)[:-2]  # without the closing "\n}"
            self._json.write((head + ',\n "rows": [').encode("utf-8"))
            self._json_end = self._json.tell()
            self._write_json_tail()
        except OSError as exc:
            self._fail(exc)

    # ---- recording -----------------------------------------------------------------------
    def record(self, wait: bool = False) -> dict | None:
        rep = self.engine.batch_report(wait=wait)
        if rep.steps == 0:
            return None
        new_phase = False
        for ph in rep.phase_ms_per_step:
            if ph not in self.phases:
                self.phases.append(ph)
                new_phase = True
        quantities = self.engine.logged_quantities()
        for name in quantities:
            if name not in self.quantities:
                self.quantities.append(name)
                new_phase = True
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
            **quantities,
        }
        self.last_row = row
        self.count += 1
        if self.error is None and self._csv is not None:
            try:
                if new_phase:
                    self._rewrite_csv_header()
                self._csv.write(_csv_line([row.get(k) for k in self.columns()]))
                self._csv.flush()
                self._json.seek(self._json_end)
                self._json.write(((",\n" if self.count > 1 else "\n") + json.dumps(row)).encode("utf-8"))
                self._json_end = self._json.tell()
                self._write_json_tail()
            except (OSError, ValueError) as exc:
                self._fail(exc)
        return row

    def columns(self) -> list[str]:
        return (["wall_time", "step", "steps_measured", "engine", "variant"]
                + [f"phase_{p}_ms" for p in self.phases]
                + ["ms_per_step", "updates_per_s", "gbytes_per_s", "roofline_pct"] + list(self.quantities))

    def _write_json_tail(self) -> None:
        self._json.write(('\n ],\n "columns": ' + json.dumps(self.columns()) + "\n}\n").encode("utf-8"))
        self._json.truncate()
        self._json.flush()

    def _rewrite_csv_header(self) -> None:
        """A new phase or quantity column: copy the rows (streamed, not loaded) under the new header."""
        self._csv.close()
        cols = self.columns()
        tmp = self.csv_path.with_name(f".{self.csv_path.name}.{os.getpid()}.tmp")
        try:
            with open(self.csv_path, newline="", encoding="utf-8") as src, open(tmp, "wb") as dst:
                dst.write(_csv_line(cols))
                for r in csv.DictReader(src):
                    dst.write(_csv_line([r.get(k) for k in cols]))
            os.replace(tmp, self.csv_path)
        finally:
            tmp.unlink(missing_ok=True)
            self._csv = open(self.csv_path, "ab")

    def _fail(self, exc: Exception) -> None:
        where = self.csv_path if self._spool is None else "the timing log spool"
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        lost = f" (rows after step {self.engine.step_count} are lost)" if self.count else ""
        self.error = f"cannot write {where}: {detail}{lost}"
        self.close()

    def __del__(self):  # an app that rebuilds its engine drops the old log: close its files
        try:
            self.close()
        except Exception:
            pass

    # ---- output --------------------------------------------------------------------------
    def paths(self) -> list[Path]:
        return [self.csv_path, self.json_path]

    def flush(self) -> None:
        for fh in (self._csv, self._json):
            if fh is not None and not fh.closed:
                fh.flush()
                os.fsync(fh.fileno())

    def close(self) -> None:
        for fh in (self._csv, self._json):
            if fh is not None and not fh.closed:
                try:
                    fh.flush()
                    os.fsync(fh.fileno())
                except OSError as exc:
                    if self.error is None:
                        self.error = f"cannot write {fh.name}: {exc.strerror or exc}"
                finally:
                    fh.close()

    def write(self, path: str | Path) -> list[Path]:
        """The log as ``path`` (.csv or .json) and its sibling of the other kind.

        For the log's own path this finishes the streamed files (flush + fsync); for another path
        it copies them atomically. ExportError if they cannot be written (or streaming failed).
        """
        try:
            csv_path, json_path = timing_paths(path)
        except ValueError as exc:
            raise ExportError(f"cannot write {path}: {exc}") from None
        if self.error is not None:
            raise ExportError(self.error)
        if self.csv_path is None:
            raise ExportError(f"cannot write {path}: this timing log keeps no rows (made with spool=False)")
        try:
            self.flush()
        except OSError as exc:
            raise ExportError(f"cannot write {self.csv_path}: {exc.strerror or exc}") from None
        if csv_path.resolve() == self.csv_path.resolve():
            return [self.csv_path, self.json_path]
        return [write_atomic(dst, lambda tmp, s=src: shutil.copyfile(s, tmp))
                for src, dst in ((self.csv_path, csv_path), (self.json_path, json_path))]

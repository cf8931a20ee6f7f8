"""Timing logs, streamed to disk: one CSV row per measured batch, and a JSON file with metadata
and the same rows.

CSV columns: wall_time, step, time (the simulated time at that step, in the metadata's
``time_units``), steps_measured, engine, variant, phase_<name>_ms (per step, one column per
phase), ms_per_step, updates_per_s, gbytes_per_s, roofline_pct.

JSON: ``{"metadata": {...}, "rows": [{...}, ...], "columns": [...]}`` — one document, one row per
line. Rows go to disk as they are recorded (nothing is kept in memory, so a run of days stays
small): the CSV is appended to, and the JSON's closing ``], "columns": [...]}`` is rewritten after
each row, so both files are complete and readable at every moment of the run (``json.load``,
``csv.DictReader``), and a killed run keeps every row up to its last batch. A phase that first
appears mid-run (a variant switch in the app) adds its CSV column by rewriting the header once.
A row that cannot be written (full disk, file-size limit) is rolled back in both files, which
then keep every earlier row (TimingLog's doc says how).

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

from .atomic import ExportError, describe_cause, make_folder, output_writer, write_atomic, write_atomic_group

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
        # what the rows' simulated "time" is in, as the window's status line says it ("–": none)
        "time_units": getattr(engine, "time_units", ""),
    }
    return meta


def _csv_line(values: list) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue().encode("utf-8")


@output_writer("a timing log (.csv + .json)")
class TimingLog:
    """Streams rows to a .csv/.json pair as they are recorded; memory stays bounded.

    How the files stay complete at every moment, and memory flat over a run of hours: rows are
    appended in place (rewriting the whole file per row would cost time growing with the run, and
    keeping rows in memory would grow with it). The pair is created complete (header, metadata,
    no rows) in temporary files renamed into place, so a log that cannot even start leaves a
    previous log of that name as it was. A row is then appended to the CSV, and written over the
    JSON's closing part followed by a new one. A write that fails (full disk, file-size limit) is
    rolled back: both files are cut back to their size before the row (shrinking a file needs no
    space) and the JSON's old closing part is put back into space it already held. So both keep
    every row before the failed one and stay parseable. Data reach the disk with an fsync at most
    once a second (FSYNC_INTERVAL) and at the end: an fsync per batch would cost a fast GPU run
    more than its steps.

    ``record()`` never raises: a write that fails sets ``error`` (one line: the file, the cause,
    the rows kept) and stops the streaming. ``close()`` never raises. ``write(path)`` returns the
    files written and raises ExportError when they cannot be.
    """

    FSYNC_INTERVAL = 1.0  # seconds between fsyncs of the streamed files

    @staticmethod
    def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n

    def __init__(self, engine, argv: list[str] | None = None, path: str | Path | None = None,
                 spool: bool = True):
        self.engine = engine
        self.meta = run_metadata(engine, argv)
        self.phases: list[str] = []
        self.quantities: list[str] = []  # engine.logged_quantities() columns, in order of appearance
        self.count = 0  # rows recorded
        self.written = 0  # rows on disk
        self.last_row: dict | None = None
        self.last_step: int | None = None  # the step of the last row on disk
        self.error: str | None = None
        self._spool = None
        self._csv = self._json = None  # raw file descriptors of the streamed files
        self._csv_size = 0
        self._json_end = 0  # where the JSON's closing part starts
        self._json_size = 0
        self._json_tail = b""
        self._synced = 0.0
        self.csv_path = self.json_path = None
        if path is None and not spool:  # rows are only summarised (a run without --timings)
            return
        if path is None:
            self._spool = tempfile.TemporaryDirectory(prefix="nagare-timings-")
            path = Path(self._spool.name) / "timings.csv"
        self.csv_path, self.json_path = timing_paths(path)
        existed = self.csv_path.exists() or self.json_path.exists()
        try:
            make_folder(self.csv_path.parent)
            for p in (self.csv_path, self.json_path):  # opening a FIFO for writing blocks forever
                if p.exists() and not p.is_file():
                    raise OSError(21, f"{p} exists and is not a regular file")
            head = _csv_line(self.columns())
            meta = json.dumps({"metadata": self.meta}, indent=1)[:-2]  # without the closing "\n}"
            json_head = (meta + ',\n "rows": [').encode("utf-8")
            tail = self._tail()
            write_atomic_group([(self.csv_path, lambda tmp: tmp.write_bytes(head)),
                                (self.json_path, lambda tmp: tmp.write_bytes(json_head + tail))])
            self._csv = os.open(self.csv_path, os.O_RDWR)
            self._json = os.open(self.json_path, os.O_RDWR)
        except (OSError, ExportError) as exc:
            kept = ("the previous files of that name are kept unchanged" if existed
                    else "no timing log was left")
            self._fail(exc, kept)
            return
        self._csv_size = len(head)
        self._json_end, self._json_tail = len(json_head), tail
        self._json_size = self._json_end + len(tail)

    # ---- recording -----------------------------------------------------------------------
    def record(self, wait: bool = False, quantities: dict | None = None,
               at: tuple[int, float] | None = None) -> dict | None:
        """One row of the samples since the last; ``quantities``: the logged quantities to write
        (a caller that must not wait for the device passes its newest reading), else the engine's
        logged_quantities() now. ``at``: the (step, simulated time) the row is stamped with, read
        together by a caller that must not wait for a time kept on the device; else the engine's
        step and time now."""
        rep = self.engine.batch_report(wait=wait)
        if rep.steps == 0:
            return None
        new_phase = False
        for ph in rep.phase_ms_per_step:
            if ph not in self.phases:
                self.phases.append(ph)
                new_phase = True
        caller_waits = quantities is None  # a caller that must not wait passes its quantities
        if quantities is None:
            quantities = self.engine.logged_quantities()
        for name in quantities:
            if name not in self.quantities:
                self.quantities.append(name)
                new_phase = True
        step, sim_time = at if at is not None else (
            self.engine.step_count, self._sim_time(may_wait=wait or caller_waits))
        row = {
            "wall_time": round(time.time(), 3),
            "step": step,
            "time": sim_time,
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
                self._append(row)
            except (OSError, ExportError, ValueError) as exc:
                self._fail(exc)
        return row

    def _sim_time(self, may_wait: bool) -> float | None:
        """The engine's simulated time; None (an empty cell) where it lives on the device (SPH's
        adaptive Δt on a GPU) and the caller must not wait for it."""
        t = self.engine.device_time()
        if isinstance(t, (int, float, np.floating)):
            return float(t)
        return float(t) if may_wait else None

    def _append(self, row: dict) -> None:
        """The row at the end of the CSV and in the JSON's list; on a failure both are put back."""
        line = _csv_line([row.get(k) for k in self.columns()])
        tail = self._tail()
        item = ((",\n" if self.written else "\n") + json.dumps(row)).encode("utf-8")
        try:
            self._pwrite_all(self._csv, line, self._csv_size)
            self._pwrite_all(self._json, item + tail, self._json_end)
            if self._json_size > self._json_end + len(item) + len(tail):  # the columns list got shorter
                os.ftruncate(self._json, self._json_end + len(item) + len(tail))
        except OSError:
            self._roll_back()
            raise
        self._csv_size += len(line)
        self._json_end += len(item)
        self._json_tail = tail
        self._json_size = self._json_end + len(tail)
        self.written += 1
        self.last_step = row["step"]
        now = time.monotonic()
        if now - self._synced >= self.FSYNC_INTERVAL:
            self._synced = now
            os.fsync(self._csv)
            os.fsync(self._json)

    def _roll_back(self) -> None:
        """Cut both files back to their last complete state (see the class doc)."""
        try:
            os.ftruncate(self._csv, self._csv_size)
            os.ftruncate(self._json, self._json_size)
            self._pwrite_all(self._json, self._json_tail, self._json_end)
        except OSError as exc:
            self._damaged = f"; restoring them failed too ({describe_cause(exc)}): they may end mid-row"

    def columns(self) -> list[str]:
        return (["wall_time", "step", "time", "steps_measured", "engine", "variant"]
                + [f"phase_{p}_ms" for p in self.phases]
                + ["ms_per_step", "updates_per_s", "gbytes_per_s", "roofline_pct"] + list(self.quantities))

    def _tail(self) -> bytes:
        return ('\n ],\n "columns": ' + json.dumps(self.columns()) + "\n}\n").encode("utf-8")

    def _rewrite_csv_header(self) -> None:
        """A new phase or quantity column: copy the rows (streamed, not loaded) under the new header,
        into a new file renamed over the old one (a failure leaves the old one)."""
        cols = self.columns()

        def rewrite(tmp: Path) -> None:
            with open(self.csv_path, newline="", encoding="utf-8") as src, open(tmp, "wb") as dst:
                dst.write(_csv_line(cols))
                for r in csv.DictReader(src):
                    dst.write(_csv_line([r.get(k) for k in cols]))

        write_atomic(self.csv_path, rewrite)
        fd = os.open(self.csv_path, os.O_RDWR)
        os.close(self._csv)
        self._csv, self._csv_size = fd, os.fstat(fd).st_size

    _damaged = ""

    def _fail(self, exc: Exception, kept: str | None = None) -> None:
        where = (f"{self.csv_path} / {self.json_path.name}" if self._spool is None and self.csv_path is not None
                 else "the timing log spool")
        detail = str(exc).split(": ", 1)[-1].split("; ")[0] if isinstance(exc, ExportError) else describe_cause(exc)
        if kept is None:
            kept = (f"both keep the {self.written} row{'s' if self.written != 1 else ''} up to step {self.last_step}"
                    if self.written else "both are kept complete, with no rows")
            kept += f" (later rows are not written){self._damaged}"
        self.error = f"cannot write {where}: {detail}; {kept}"
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
        for fd in (self._csv, self._json):
            if fd is not None:
                os.fsync(fd)

    def close(self) -> None:
        """Sync and close the streamed files; never raises (a failure is kept in ``error``)."""
        for name in ("_csv", "_json"):
            fd = getattr(self, name)
            if fd is None:
                continue
            setattr(self, name, None)
            try:
                os.fsync(fd)
            except OSError as exc:
                if self.error is None:
                    rows = f"the {self.written} row{'s' if self.written != 1 else ''}"
                    self.error = (f"cannot write {self.csv_path} / {self.json_path.name}: {describe_cause(exc)} "
                                  f"(at the final sync); both keep {rows} written, but the system may not have "
                                  "saved the last ones to disk")
            finally:
                os.close(fd)

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
            raise ExportError(f"cannot write {self.csv_path}: {describe_cause(exc)}") from None
        if csv_path.resolve() == self.csv_path.resolve():
            return [self.csv_path, self.json_path]
        # both or neither: a failure keeps the previous pair of that name (the app's export)
        return write_atomic_group([(dst, lambda tmp, s=src: shutil.copyfile(s, tmp))
                                   for src, dst in ((self.csv_path, csv_path), (self.json_path, json_path))])

"""The headless run loop behind ``nagare run``: batches, progress, frames, dumps, timing logs,
checkpoints, Ctrl-C and divergence handling.

The loop advances the engine in batches (never syncing per step); between batches it checks the
diagnostics (NaN → stop), writes what was asked, and updates the progress line. Ctrl-C stops after
the current batch and still writes the timing log and a checkpoint; so does SIGTERM. A write that
fails (full disk, read-only folder) is reported in one line at once and the run goes on; nothing
already written is lost, and the run ends with a summary of what was not written and exit status
EXIT_NOT_WRITTEN. The timing log is streamed to disk batch by batch (app/timinglog.py).
"""
from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from nagare.engine.checkpoint import save_checkpoint
from nagare.engine.errors import Diverged

from . import fieldkinds, frames
from .atomic import ExportError, output_writer, write_atomic
from .packets import time_label
from .timinglog import TimingLog
from .vtkhdf import write_vtkhdf_described
from .vtkhdf_amr import octree_leaves
from .vtkhdf_series import FieldSeries, series_capacity


def npz_arrays(engine, fields: dict | None = None) -> dict[str, np.ndarray]:
    """The engine's fields as named host arrays for an .npz dump (grids by name, one solid
    "mask"; particles/boxes as name/attribute), through each field type's ``arrays`` handler."""
    out: dict[str, np.ndarray] = {}
    asnumpy = engine.backend.asnumpy
    for name, f in (engine.fields() if fields is None else fields).items():
        fieldkinds.handler_for("arrays", f)(out, name, f, asnumpy)
    return out


def field_labels(fields: dict) -> str:
    """What each dumped field is, as the app's colour bar says it (JSON: name → {label, units}): a
    field's name is short ("u") where its values may be scaled or a departure ("(u - u∞)/c∞")."""
    return json.dumps({name: {"label": getattr(f, "label", "") or "", "units": getattr(f, "units", "") or ""}
                       for name, f in fields.items()}, ensure_ascii=False)


@output_writer("an .npz dump")
def dump_fields(engine, path: str | Path) -> Path:
    if str(path).endswith(".vtkhdf"):
        return dump_vtkhdf(engine, path)[0]
    fields = engine.fields()
    arrays = npz_arrays(engine, fields)
    arrays["step"] = np.int64(engine.step_count)
    arrays["time"] = np.float64(engine.time)
    arrays["time_units"] = np.array(getattr(engine, "time_units", "") or "")
    arrays["field_labels"] = np.array(field_labels(fields))

    def writer(p: Path):
        with open(p, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    return write_atomic(path, writer)


def dump_vtkhdf(engine, path: str | Path) -> list[Path]:
    """The engine's fields as VTKHDF for ParaView (app/vtkhdf.py: grids as ImageData at ``path``,
    other kinds beside it; amr3d's leaves with their point data as OverlappingAMR,
    ``stem_octree.vtkhdf``). Returns every path written."""
    return [p for p, _ in dump_vtkhdf_described(engine, path)]


def dump_vtkhdf_described(engine, path: str | Path) -> list[tuple[Path, str]]:
    """:func:`dump_vtkhdf`, each path with a line on what it holds."""
    return write_vtkhdf_described(vtkhdf_fields(engine), path, time=engine.time, step=engine.step_count)


def say_what_each_holds(described: list[tuple[Path, str]]) -> None:
    """One stderr line per VTKHDF file: its path and what it holds (an amr3d dump writes three)."""
    for p, what in described:
        print(f"nagare: {p}: {what}", file=sys.stderr)


def vtkhdf_fields(engine) -> dict:
    """Host copies of every field, plus amr3d's leaves as ``octree`` (OverlappingAMR): what a
    VTKHDF export writes, from the CLI (--dump FILE.vtkhdf) and the app's Export alike."""
    fields = fieldkinds.host_copies(engine)
    tree = octree_leaves(engine)
    if tree is not None:
        fields["octree"] = tree
    return fields


EXIT_NOT_WRITTEN = 4  # the run finished, but some output it was asked for was not written


def rate_text(per_s: float) -> str:
    """A rate with three significant figures and an SI prefix ("512 k", "3.91 M", "1.2 G"): an SPH
    run on a CPU makes thousands of updates a second, a GPU lattice billions."""
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {prefix}"
    return f"{per_s:.3g}"


def duration_text(seconds: float) -> str:
    """A wall-clock duration as a person reads it: "42 s", "3 min 05 s", "2 h 07 min"."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class RunOptions:
    steps: int
    timings: Path | None = None
    dump: Path | None = None
    dump_every: int | None = None
    dump_dir: Path | None = None
    frames_dir: Path | None = None
    frame_every: int | None = None
    frame_legend: bool = False  # the colour bar beside each frame (grid fields)
    checkpoint: Path | None = None
    checkpoint_every: int | None = None
    batch: int = 10
    quiet: bool = False
    argv: list[str] = field(default_factory=list)
    seconds: float | None = None  # stop after this long too (``nagare soak``)
    on_batch: Callable | None = None  # called with the engine after every batch (``nagare soak``)
    series: Path | None = None  # one temporal VTKHDF file (app/vtkhdf_series.py) …
    series_every: int | None = None  # … with a step every K steps (and the first and last)


class Progress:
    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet = total, quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last_print = 0.0
        self.last_done: int | None = None  # the step count of the last line printed

    def update(self, done: int, engine, final: bool = False, failures: int = 0) -> None:
        if self.quiet:
            return
        if not final and done >= self.total:
            return  # the final line follows at once (with the last batch's timings): print it once
        if final and not self.tty and done == self.last_done:
            return  # a run stopped early (Ctrl-C, --seconds) right after its line was printed
        now = time.perf_counter()
        if not final and not self.tty and now - self.last_print < 2.0:
            return
        self.last_print, self.last_done = now, done
        rate = done / max(now - self.t0, 1e-9)
        rep = engine.timings
        frac = done / self.total if self.total else 1.0
        bar = "#" * int(24 * frac)
        thr = ""
        if rep.steps:
            thr = f"  {rate_text(rep.updates_per_s)} upd/s  {rep.gbytes_per_s:,.3g} GB/s"
            if rep.roofline_fraction is not None:
                thr += f" ({100 * rep.roofline_fraction:.0f}% roofline)"
        # the simulated time as the window's status line gives it, in the engine's units (read
        # here, after the batch's diagnostics have waited for the device anyway)
        sim = time_label(engine.time, getattr(engine, "time_units", ""))
        line = f"[{bar:<24}] {done}/{self.total} steps  {sim}  {rate:,.1f} steps/s{thr}"
        elapsed = now - self.t0
        if final:
            line += f"  in {duration_text(elapsed)}"
        elif done and elapsed >= 10.0:
            # a long run (a CPU lattice, a large SPH case) says when it will end; not before 10 s,
            # when the first batches' compiles and warm-up still dominate the rate
            line += f"  ~{duration_text((self.total - done) / rate)} left"
        if failures:
            line += f"  !! {failures} write{'s' if failures > 1 else ''} FAILED"
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


class _Interrupt:
    """Ctrl-C or SIGTERM sets a flag; the loop stops after the current batch and still writes the
    timing log and a checkpoint. A second one aborts. SIGTERM is what ``timeout``, systemd,
    containers and batch schedulers send, so it is treated like Ctrl-C."""

    SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None)

    def __init__(self):
        self.flag = False
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self):
        for s in self.SIGNALS:
            try:
                self._old[s] = signal.signal(s, self._handler)
            except ValueError:  # not the main thread: no handlers (the caller stops the run)
                pass
        return self

    @property
    def status(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    def _handler(self, signum, frame):
        if self.flag:
            self._restore()
            raise KeyboardInterrupt
        self.flag, self.signum = True, signum
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        sys.stderr.write(f"\nnagare: {name}: stopping after the current batch (again to abort)\n")

    def _restore(self):
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}

    def __exit__(self, *exc):
        self._restore()
        return False


class Outputs:
    """Every write of a run, and every one that failed: failures are said at once (a checkpoint
    loudly, every time; a frame or dump the first time and when the reason changes) and summed
    up at the end, and the run's exit status says some were not written."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.written: list[Path | str] = []  # paths, and a line for the frames folder
        self.failed: dict[str, list[tuple[int, str, str]]] = {}  # what -> [(step, path, error)]
        self.checkpoint_step: int | None = None  # step of the last checkpoint written this run
        self.checkpoint_path: Path | None = None

    def attempt(self, what: str, step: int, path, fn, *args, final: bool = False) -> Path | None:
        try:
            out = fn(*args)
        except ExportError as exc:
            self.fail(what, step, str(path), str(exc))
            return None
        if what == "checkpoint":
            self.checkpoint_step, self.checkpoint_path = step, Path(out)
        if final and out is not None:
            self.written.append(Path(out))
        return out

    def fail(self, what: str, step: int, path: str, error: str) -> None:
        earlier = self.failed.setdefault(what, [])
        earlier.append((step, path, error))
        if what == "checkpoint":
            kept = (f"the checkpoint on disk is still step {self.checkpoint_step} ({self.checkpoint_path})"
                    if self.checkpoint_step is not None else "no checkpoint of this run is on disk")
            print(f"{self._nl()}nagare: WARNING: checkpoint at step {step} NOT written: {error}; {kept}",
                  file=sys.stderr)
        elif len(earlier) == 1 or _reason(earlier[-2][2]) != _reason(error):
            print(f"{self._nl()}nagare: {what} not written: {error}", file=sys.stderr)

    def _nl(self) -> str:
        return "\n" if not self.quiet and sys.stderr.isatty() else ""  # off the progress line

    @property
    def failures(self) -> int:
        return sum(len(v) for v in self.failed.values())

    def summary(self) -> list[str]:
        lines = []
        for what, items in self.failed.items():
            steps = list(dict.fromkeys(s for s, _, _ in items))
            shown = ", ".join(map(str, steps[:8])) + (f", … ({len(steps)} in all)" if len(steps) > 8 else "")
            lines.append(f"nagare: NOT WRITTEN: {what} at step{'s' if len(steps) > 1 else ''} {shown}; "
                         f"last error: {items[-1][2]}")
        if "checkpoint" in self.failed:
            lines.append("nagare: NOT WRITTEN: " + (
                f"the last checkpoint written is step {self.checkpoint_step} ({self.checkpoint_path})"
                if self.checkpoint_step is not None else "no checkpoint of this run is on disk"))
        return lines


def run(engine, opts: RunOptions) -> int:
    """Run ``opts.steps`` steps (or until ``opts.seconds`` have passed).

    Returns the exit status: 0 ok, 3 diverged, 130 Ctrl-C, 143 SIGTERM, and EXIT_NOT_WRITTEN (4)
    when the run finished but something it was asked to write (frame, dump, timing log,
    checkpoint) was not written; a final summary says what.
    """
    out = Outputs(opts.quiet)
    log = TimingLog(engine, opts.argv, path=opts.timings, spool=False)
    if opts.timings is not None and log.error is not None:
        out.fail("timing log", engine.step_count, str(opts.timings), log.error)
    log_failed = log.error is not None
    progress = Progress(opts.steps, opts.quiet)
    start = engine.step_count
    target = start + opts.steps
    t_end = None if opts.seconds is None else time.perf_counter() + opts.seconds
    status = 0

    frames_written = 0
    frame_cache: dict = {}  # which field holds the tracers drawn over a frame, found once
    frame_step = None  # the step of the last frame attempted
    dump_step = None  # … and of the last --dump-dir dump
    dumps_written = 0

    def frame():
        nonlocal frames_written, frame_step
        frame_step = engine.step_count
        path = opts.frames_dir / f"frame_{engine.step_count:08d}.png"
        if out.attempt("frame", engine.step_count, path, frames.save_frame, engine, path, None,
                       opts.frame_legend, frame_cache) is not None:
            frames_written += 1

    def drawn_before() -> bool:
        """A resumed run's first state is its checkpoint's, whose frame the run that wrote it drew
        (the only frame of this step --frames lets a resumed run find there: app/run_outputs.py)."""
        return engine.step_count == start and (opts.frames_dir / f"frame_{start:08d}.png").exists()

    def dump_into_folder():
        nonlocal dump_step, dumps_written
        dump_step = engine.step_count
        path = opts.dump_dir / f"{engine.family}_{engine.step_count:08d}.npz"
        if out.attempt("dump", engine.step_count, path, dump_fields, engine, path) is not None:
            dumps_written += 1

    series = None
    if opts.series is not None:
        series = FieldSeries(opts.series, series_capacity(opts.steps, opts.series_every or opts.steps))
    series_step = None
    checkpoint_tried = None  # the step of the last periodic checkpoint attempted

    def series_append():
        nonlocal series_step
        if series_step != engine.step_count:
            series_step = engine.step_count
            out.attempt("series", engine.step_count, opts.series, series.append, engine)

    try:
        if opts.frames_dir is not None and not drawn_before():
            frame()
        if series is not None:
            series_append()
        with _Interrupt() as intr:
            while engine.step_count < target:
                n = min(opts.batch, target - engine.step_count)
                for every in (opts.frame_every, opts.dump_every, opts.checkpoint_every, opts.series_every):
                    if every:
                        n = min(n, every - (engine.step_count - start) % every)
                engine.step(n)
                try:
                    engine.diagnostics()
                except Diverged as exc:
                    print(f"nagare: {exc}", file=sys.stderr)
                    status = 3
                    break
                log.record()
                if log.error is not None and not log_failed and opts.timings is not None:
                    log_failed = True
                    out.fail("timing log", engine.step_count, str(opts.timings), log.error)
                done = engine.step_count - start
                if opts.frame_every and opts.frames_dir is not None and done % opts.frame_every == 0:
                    frame()
                if opts.dump_every and opts.dump_dir is not None and done % opts.dump_every == 0:
                    dump_into_folder()
                if series is not None and opts.series_every and done % opts.series_every == 0:
                    series_append()
                if opts.checkpoint_every and opts.checkpoint is not None and done % opts.checkpoint_every == 0:
                    # Periodic checkpoints of states that passed the diagnostics: after a divergence
                    # the last good one stays on disk.
                    out.attempt("checkpoint", engine.step_count, opts.checkpoint, save_checkpoint,
                                _checkpoint(engine), opts.checkpoint)
                    checkpoint_tried = engine.step_count
                progress.update(done, engine, failures=out.failures)
                if opts.on_batch is not None:
                    opts.on_batch(engine)
                if intr.flag:
                    status = intr.status
                    break
                if t_end is not None and time.perf_counter() >= t_end:
                    break
        if status != 3:  # the state the run ends on, when the period did not end there (not a diverged one)
            if opts.frames_dir is not None and frame_step != engine.step_count and not drawn_before():
                frame()
            if opts.dump_every and opts.dump_dir is not None and dump_step != engine.step_count:
                dump_into_folder()
        log.record(wait=True)
        if log.error is not None and not log_failed and opts.timings is not None:
            out.fail("timing log", engine.step_count, str(opts.timings), log.error)
        progress.update(engine.step_count - start, engine, final=True, failures=out.failures)
        if opts.timings is not None and not log_failed and log.error is None:
            paths = out.attempt("timing log", engine.step_count, opts.timings, log.write, opts.timings)
            if paths:
                out.written.extend(Path(p) for p in paths)
        if series is not None and status != 3:
            series_append()  # the last state too, when the run did not end on a multiple of K
        if series is not None and series.paths:
            out.written.extend(series.paths)
        if status == 0 and opts.dump is not None and str(opts.dump).endswith(".vtkhdf"):
            described = out.attempt("dump", engine.step_count, opts.dump, dump_vtkhdf_described, engine, opts.dump)
            out.written.extend(p for p, _ in described or [])
            if described and not opts.quiet:
                say_what_each_holds(described)
        elif status == 0 and opts.dump is not None:
            out.attempt("dump", engine.step_count, opts.dump, dump_fields, engine, opts.dump, final=True)
        elif opts.dump is not None:  # said, not skipped in silence: the user asked for it
            why = ("the state diverged (its fields are not worth keeping)" if status == 3
                   else "the run was interrupted (run it again to the end, or resume its checkpoint)")
            print(f"nagare: --dump {opts.dump} not written: {why}, step {engine.step_count}", file=sys.stderr)
        if status != 3 and opts.checkpoint is not None and checkpoint_tried == engine.step_count:
            # the periodic checkpoint of this very step: written (said in the summary) or said to have failed
            if out.checkpoint_step == engine.step_count:
                out.written.append(opts.checkpoint)
        elif status != 3 and (opts.checkpoint is not None or status in (130, 143)):
            path = opts.checkpoint or Path(f"{engine.family}-interrupted-step{engine.step_count}.ckpt.npz")
            out.attempt("checkpoint", engine.step_count, path, save_checkpoint, _checkpoint(engine), path,
                        final=True)
        elif status == 3 and opts.checkpoint is not None:
            if out.checkpoint_step is not None:
                print(f"nagare: the last good checkpoint is {opts.checkpoint} (step {out.checkpoint_step})",
                      file=sys.stderr)
            elif opts.checkpoint.exists():
                print(f"nagare: the last good checkpoint is {opts.checkpoint} (written before this run)",
                      file=sys.stderr)
    finally:
        log.close()
    if frames_written:  # the summary says where the frames went, as it does for every other output
        out.written.append(f"{frames_written} frame{'s' if frames_written != 1 else ''} in {opts.frames_dir}/")
    if dumps_written:
        out.written.append(f"{dumps_written} dump{'s' if dumps_written != 1 else ''} in {opts.dump_dir}/")
    if out.written and not opts.quiet:
        end = f"step {engine.step_count}, {time_label(engine.time, getattr(engine, 'time_units', ''))}"
        print("nagare: wrote " + ", ".join(dict.fromkeys(map(str, out.written))) + f" (the run ended at {end})",
              file=sys.stderr)
    for line in out.summary():
        print(line, file=sys.stderr)
    if status == 0 and out.failures:
        status = EXIT_NOT_WRITTEN
    return status


def _reason(error: str) -> str:
    """'cannot write a/frame_0010.png: Not a directory; no frame_0010.png was left' → 'Not a
    directory' (the same failure for every frame)."""
    return error.split(": ", 1)[-1].split("; ", 1)[0]


def _checkpoint(engine) -> dict:
    """The engine's checkpoint (its meta names the preset's source, so a refusal can name it)."""
    return engine.checkpoint()

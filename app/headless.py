"""The headless run loop behind ``nagare run``: batches, progress, frames, dumps, timing logs,
checkpoints, Ctrl-C and divergence handling.

The loop advances the engine in batches (never syncing per step); between batches it checks the
diagnostics (NaN → stop), writes what was asked, and updates the progress line. Ctrl-C stops after
the current batch and still writes the timing log and a checkpoint. A write that fails (full disk,
read-only folder) is reported in one line and the run goes on; nothing already written is lost.
"""
from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from nagare.engine.checkpoint import save_checkpoint
from nagare.engine.errors import Diverged
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles

from . import frames
from .atomic import ExportError, write_atomic
from .timinglog import TimingLog


def host_fields(engine) -> dict[str, np.ndarray]:
    """The engine's fields as named host arrays (particles/boxes as name/attribute)."""
    out: dict[str, np.ndarray] = {}
    asnp = engine.backend.asnumpy
    for name, f in engine.fields().items():
        if isinstance(f, (Grid2D, Grid3D)):
            out[name] = asnp(f.data)
            if f.mask is not None and "mask" not in out:
                out["mask"] = asnp(f.mask)
        elif isinstance(f, Particles):
            out[f"{name}/positions"] = asnp(f.positions)
            for k, v in f.attributes.items():
                out[f"{name}/{k}"] = asnp(v)
        elif isinstance(f, Boxes):
            out[f"{name}/lo"], out[f"{name}/hi"] = asnp(f.lo), asnp(f.hi)
            if f.level is not None:
                out[f"{name}/level"] = asnp(f.level)
    return out


def dump_fields(engine, path: str | Path) -> Path:
    arrays = host_fields(engine)
    arrays["step"] = np.int64(engine.step_count)
    arrays["time"] = np.float64(engine.time)

    def writer(p: Path):
        with open(p, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    return write_atomic(path, writer)


@dataclass
class RunOptions:
    steps: int
    timings: Path | None = None
    dump: Path | None = None
    dump_every: int | None = None
    dump_dir: Path | None = None
    frames_dir: Path | None = None
    frame_every: int | None = None
    checkpoint: Path | None = None
    checkpoint_every: int | None = None
    batch: int = 10
    quiet: bool = False
    argv: list[str] = field(default_factory=list)


class Progress:
    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet = total, quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last_print = 0.0

    def update(self, done: int, engine, final: bool = False) -> None:
        if self.quiet:
            return
        now = time.perf_counter()
        if not final and not self.tty and now - self.last_print < 2.0:
            return
        self.last_print = now
        rate = done / max(now - self.t0, 1e-9)
        rep = engine.timings
        frac = done / self.total if self.total else 1.0
        bar = "#" * int(24 * frac)
        thr = ""
        if rep.steps:
            thr = f"  {rep.updates_per_s / 1e6:,.1f} M upd/s  {rep.gbytes_per_s:,.1f} GB/s"
            if rep.roofline_fraction is not None:
                thr += f" ({100 * rep.roofline_fraction:.0f}% roofline)"
        line = f"[{bar:<24}] {done}/{self.total} steps  {rate:,.1f} steps/s{thr}"
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


class _Interrupt:
    """Ctrl-C sets a flag; the loop stops after the current batch. A second Ctrl-C aborts."""

    def __init__(self):
        self.flag = False

    def __enter__(self):
        self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.flag:
            signal.signal(signal.SIGINT, self._old)
            raise KeyboardInterrupt
        self.flag = True
        sys.stderr.write("\nnagare: stopping after the current batch (Ctrl-C again to abort)\n")

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._old)
        return False


def _try_write(what: str, fn, *args) -> Path | None:
    try:
        return fn(*args)
    except ExportError as exc:
        print(f"nagare: {what} not written: {exc}", file=sys.stderr)
        return None


def run(engine, opts: RunOptions) -> int:
    """Run ``opts.steps`` steps. Returns the exit status (0 ok, 3 diverged, 130 interrupted)."""
    log = TimingLog(engine, opts.argv)
    progress = Progress(opts.steps, opts.quiet)
    start = engine.step_count
    target = start + opts.steps
    status = 0
    if opts.frames_dir is not None:
        _try_write("frame", frames.save_frame, engine, opts.frames_dir / f"frame_{engine.step_count:08d}.png")
    with _Interrupt() as intr:
        while engine.step_count < target:
            n = min(opts.batch, target - engine.step_count)
            for every in (opts.frame_every, opts.dump_every, opts.checkpoint_every):
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
            done = engine.step_count - start
            if opts.frame_every and opts.frames_dir is not None and done % opts.frame_every == 0:
                _try_write("frame", frames.save_frame, engine, opts.frames_dir / f"frame_{engine.step_count:08d}.png")
            if opts.dump_every and opts.dump_dir is not None and done % opts.dump_every == 0:
                _try_write("dump", dump_fields, engine,
                           opts.dump_dir / f"{engine.family}_{engine.step_count:08d}.npz")
            if opts.checkpoint_every and opts.checkpoint is not None and done % opts.checkpoint_every == 0:
                # Periodic checkpoints of states that passed the diagnostics: after a divergence
                # the last good one stays on disk.
                _try_write("checkpoint", save_checkpoint, engine.checkpoint(), opts.checkpoint)
            progress.update(done, engine)
            if intr.flag:
                status = 130
                break
    log.record(wait=True)
    progress.update(engine.step_count - start, engine, final=True)
    written = []
    if opts.timings is not None:
        paths = _try_write("timing log", log.write, opts.timings)
        written += paths or []
    if status == 0 and opts.dump is not None:
        written.append(_try_write("dump", dump_fields, engine, opts.dump))
    if status != 3 and (opts.checkpoint is not None or status == 130):
        path = opts.checkpoint or Path(f"{engine.family}-interrupted-step{engine.step_count}.ckpt.npz")
        written.append(_try_write("checkpoint", save_checkpoint, engine.checkpoint(), path))
    elif status == 3 and opts.checkpoint is not None and opts.checkpoint.exists():
        print(f"nagare: the last good checkpoint is {opts.checkpoint}", file=sys.stderr)
    written = [str(p) for p in written if p]
    if written and not opts.quiet:
        print("nagare: wrote " + ", ".join(written), file=sys.stderr)
    return status

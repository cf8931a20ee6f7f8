"""``nagare soak PRESET --minutes N``: a long headless run that reports memory growth.

The run goes through the same loop as ``nagare run`` (app/headless.py, timing log streamed to
disk), so what grows here grows there. Memory is sampled ``samples`` times: the process's resident
set (RSS) and, on CuPy, the device memory in use (the memory pool's used bytes and the device's
total in use). The first fifth of the run is warm-up (caches, pools, first allocations); growth is
measured from its end: the last sample minus the warm-up one, the least-squares slope over the
samples after warm-up (MiB per hour), and the growth over the second half of the run (bounded
caches such as the engine's 4096-sample timing window fill early and then stop; a leak keeps
growing). ``--max-growth-mib`` applies to the growth after warm-up.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .atomic import ExportError, output_writer, write_text_atomic
from .headless import RunOptions, run
from .run_outputs import Output, check_collisions, lock_outputs
from .timinglog import timing_paths

MIB = 2 ** 20


def rss_bytes() -> int | None:
    """The current resident set size (not the peak), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # optional, not a dependency: the fallback where /proc is missing

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def gpu_bytes(engine) -> dict | None:
    """On CuPy: the memory pool's used/held bytes and the device's bytes in use."""
    if not getattr(engine.backend, "is_gpu", False):
        return None
    try:
        import cupy  # optional dependency (CuPy)

        pool = cupy.get_default_memory_pool()
        free, total = cupy.cuda.runtime.memGetInfo()
        return {"pool_used": int(pool.used_bytes()), "pool_held": int(pool.total_bytes()),
                "device_used": int(total - free)}
    except Exception:
        return None


def slope_per_hour(ts: list[float], ys: list[float]) -> float:
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    den = sum((t - mt) ** 2 for t in ts)
    return 0.0 if den == 0 else 3600.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den


@output_writer("the soak's samples")
def write_soak_json(path: Path, summary: dict, rows: list) -> Path:
    return write_text_atomic(path, json.dumps({"summary": summary, "samples": rows}, indent=1))


def soak(engine, minutes: float, batch: int, samples: int = 30, timings: Path | None = None,
         json_path: Path | None = None, max_growth_mib: float | None = None, argv: list[str] | None = None) -> int:
    seconds = 60.0 * minutes
    every = seconds / samples
    rows: list[dict] = []
    t0 = time.perf_counter()
    state = {"next": 0.0}

    def sample(eng, force: bool = False) -> None:
        t = time.perf_counter() - t0
        if not force and t < state["next"]:
            return
        state["next"] = t + every
        row = {"t_s": round(t, 3), "step": eng.step_count, "rss_bytes": rss_bytes(), "gpu": gpu_bytes(eng)}
        rows.append(row)
        gpu = f"  GPU {row['gpu']['device_used'] / MIB:,.1f} MiB" if row["gpu"] else ""
        rss = "?" if row["rss_bytes"] is None else f"{row['rss_bytes'] / MIB:,.1f}"
        print(f"soak: {t:8.1f} s  step {eng.step_count:>10}  RSS {rss} MiB{gpu}", file=sys.stderr, flush=True)

    print(f"nagare soak: {engine.preset.source} on {engine.backend.name} for {minutes:g} min "
          f"({samples} samples, batches of {batch} steps)", file=sys.stderr)
    outs = [Output(f"--json {json_path}", {json_path: ""})] if json_path is not None else []
    if timings is not None:
        outs.append(Output(f"--timings {timings}", dict.fromkeys(timing_paths(timings), "")))
    check_collisions(outs)  # --json r.json beside --timings r.csv (which writes r.json too): refused (exit 2)
    locks = lock_outputs(outs)  # another live run writing them: refused (exit 2) before the soak starts
    tmp = None
    try:
        if timings is None:  # the streamed timing log is part of what is soaked
            tmp = tempfile.TemporaryDirectory(prefix="nagare-soak-")
            timings = Path(tmp.name) / "timings.csv"
        try:
            sample(engine, force=True)
            status = run(engine, RunOptions(steps=2 ** 62, timings=timings, batch=batch, quiet=True,
                                            argv=argv or [], seconds=seconds, on_batch=sample))
            sample(engine, force=True)
        finally:
            if tmp is not None:
                tmp.cleanup()
        return _report(rows, status, json_path, max_growth_mib)
    finally:
        locks.release()


def _report(rows: list, status: int, json_path: Path | None, max_growth_mib: float | None) -> int:
    from .headless import EXIT_NOT_WRITTEN

    summary = summarize(rows)
    summary["status"] = status
    for line in report_lines(summary):
        print(line)
    exceeded = max_growth_mib is not None and any(
        summary.get(k) is not None and summary[k] > max_growth_mib for k in ("rss_growth_mib", "gpu_growth_mib"))
    if json_path is not None:
        try:
            write_soak_json(json_path, summary, rows)
        except ExportError as exc:
            print(f"nagare soak: NOT WRITTEN: {exc}", file=sys.stderr)
            status = status or EXIT_NOT_WRITTEN
    if status != 0:
        return status
    if exceeded:
        print(f"nagare soak: memory grew by more than {max_growth_mib:g} MiB after the warm-up", file=sys.stderr)
        return 1
    return 0


def summarize(rows: list[dict]) -> dict:
    warm = rows[min(max(1, len(rows) // 5), len(rows) - 2)] if len(rows) >= 3 else (rows[0] if rows else None)
    after = [r for r in rows if warm is not None and r["t_s"] >= warm["t_s"]]
    out: dict = {"samples": len(rows), "seconds": rows[-1]["t_s"] if rows else 0.0,
                 "steps": (rows[-1]["step"] - rows[0]["step"]) if rows else 0, "warmup_s": warm["t_s"] if warm else 0.0}
    for key, get in (("rss", lambda r: r["rss_bytes"]), ("gpu", lambda r: (r["gpu"] or {}).get("device_used"))):
        pts = [(r["t_s"], get(r)) for r in after if get(r) is not None]
        if len(pts) < 2:
            out[f"{key}_growth_mib"] = out[f"{key}_mib_per_hour"] = None
            continue
        out[f"{key}_start_mib"] = pts[0][1] / MIB
        out[f"{key}_end_mib"] = pts[-1][1] / MIB
        out[f"{key}_growth_mib"] = (pts[-1][1] - pts[0][1]) / MIB
        out[f"{key}_mib_per_hour"] = slope_per_hour([t for t, _ in pts], [v / MIB for _, v in pts])
        # Bounded caches (the engine's 4096-sample timing window, memory pools) fill early and stop:
        # growth over the second half is what keeps going.
        late = [(t, v) for t, v in pts if t >= pts[-1][0] / 2]
        out[f"{key}_late_growth_mib"] = (late[-1][1] - late[0][1]) / MIB if len(late) >= 2 else None
    return out


SHORT_SOAK_S = 300  # a soak shorter than this gets its fitted hourly rate with a caveat


def report_lines(s: dict) -> list[str]:
    lines = [f"soak: {s['steps']} steps in {s['seconds']:.1f} s; growth measured after a {s['warmup_s']:.1f} s warm-up"]
    for key, name in (("rss", "RSS"), ("gpu", "GPU memory")):
        if s.get(f"{key}_growth_mib") is None:
            if key == "rss":
                lines.append("soak: RSS could not be measured on this system")
            continue
        # an hour's rate fitted over seconds says little (a pool's first growth reads as a leak): said so
        fit = (f"{s[f'{key}_mib_per_hour']:+,.2f} MiB/hour fitted" if s["seconds"] >= SHORT_SOAK_S else
               f"{s[f'{key}_mib_per_hour']:+,.2f} MiB/hour fitted over only {s['seconds']:.0f} s: "
               f"soak {SHORT_SOAK_S // 60} minutes or more for a rate")
        lines.append(f"soak: {name} {s[f'{key}_start_mib']:,.1f} → {s[f'{key}_end_mib']:,.1f} MiB: "
                     f"{s[f'{key}_growth_mib']:+,.2f} MiB ({fit})"
                     + ("" if s.get(f"{key}_late_growth_mib") is None else
                        f"; {s[f'{key}_late_growth_mib']:+,.2f} MiB over the second half"))
    return lines

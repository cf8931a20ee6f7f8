"""``nagare bench scale``: weak and strong scaling of the decomposable families on 1, 2 and 4 GPUs.

The sizes are each family's (its adapter's ``scaling``: e.g. lbm2d 8192² and diffusion3d 512³ per
GPU weak, lbm2d 16384² strong): weak scaling keeps the size per sub-domain fixed and grows the
slowest axis with N; strong scaling splits one grid. Each row: MLUPS, efficiency and the
exchange's share of the step time (overlap off; with overlap on the exchange is hidden inside the
step phase). Devices: NCCL over N GPUs when N are visible, else N sub-domains on the one device
(or NumPy) — then the efficiency is against one device doing all the work (ideal 1.0: the
decomposition's own overhead), and the table says so in its ``devices`` column.
On NumPy the sizes are small stand-ins; absolute numbers only from a GPU (docs/benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time

from ..atomic import ExportError, output_writer, write_text_atomic
from ..backend import get_backend
from ..contract import OutOfMemory
from ..families import create_engine, decomp_adapter, decomposable_families
from ..presets import validate

MODES = ("weak", "strong")


def sizes(on_gpu: bool) -> dict[str, dict[str, tuple[int, ...]]]:
    """{mode: {family: grid size}} of every decomposable family's adapter."""
    out: dict = {mode: {} for mode in MODES}
    for family in decomposable_families():
        for mode, size in decomp_adapter(family).scaling.get("gpu" if on_gpu else "cpu", {}).items():
            out[mode][family] = tuple(size)
    return out


def _preset(family: str, size, parts: int, overlap: str, backend_name: str):
    grid = dict(zip(("nx", "ny", "nz"), size))
    raw = {"engine": family, "description": f"bench scale {family}", "grid": grid,
           "decomp": {"parts": parts, "overlap": overlap}, **copy.deepcopy(decomp_adapter(family).scaling_preset)}
    return validate(raw, f"bench scale {family}", backend_name)


def _timed_steps(e, steps: int) -> float:
    t0 = time.perf_counter()
    e.step(steps)
    e.synchronize()
    return time.perf_counter() - t0


def _issue_ms(e, steps: int) -> float:
    """Host time to issue one step (ms): ``steps`` steps timed without waiting for the GPUs, from
    idle devices. One thread drives every GPU, so a step whose issue time reaches its GPU time is
    launch-bound (the diagnosis behind overlap's cost; docs/multi-gpu.md §6)."""
    e.synchronize()
    t0 = time.perf_counter()
    e.step(steps)
    issued = time.perf_counter() - t0
    e.synchronize()
    return issued / steps * 1e3


def _exchange_ms(e, repeats: int) -> float | None:
    """Wall time of one halo exchange alone (ms; None undecomposed): ``repeats`` back-to-back
    exchanges of the state's halo rows, synchronised. Run after the timed steps only: repeated
    exchanges are idempotent for the pull layouts but would disturb AA's in-place slots, and the
    engine is discarded afterwards."""
    adapter = getattr(e, "adapter", None)
    if adapter is None or e.parts < 2:
        return None
    adapter.exchange_once()
    e.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        adapter.exchange_once()
    e.synchronize()
    return (time.perf_counter() - t0) / repeats * 1e3


def measure(family: str, size, parts: int, overlap: str, backend, min_time: float = 0.5,
            repeats: int = 3, steps: int | None = None) -> dict:
    """One cell: the median MLUPS of ``repeats`` timed runs of at least ``min_time`` seconds each
    (or exactly ``steps`` steps), after a warm-up that compiles and runs the first exchanges."""
    preset = _preset(family, size, parts, overlap, backend.name)
    e = create_engine(preset, backend)
    e.step(3)  # warm-up: compile, first exchanges
    e.synchronize()
    if steps is None:
        per_step = _timed_steps(e, 5) / 5
        steps = max(10, int(min_time / max(per_step, 1e-9)) + 1)
    walls = sorted(_timed_steps(e, steps) for _ in range(repeats))
    wall = walls[len(walls) // 2]
    step_ms = wall / steps * 1e3
    issue_ms = _issue_ms(e, min(steps, 20))
    exch = _exchange_ms(e, max(10, min(steps, 200)))
    transport = getattr(e, "transport", None)
    devices = parts if transport is not None and transport.name == "nccl" else 1
    row = {"family": family, "grid": "x".join(map(str, size)), "parts": parts, "overlap": overlap,
           "transport": transport.name if transport is not None else "-", "devices": devices,
           "variants": dict(e.selection), "steps": steps, "repeats": repeats,
           "step_ms": step_ms, "exchange_ms": exch, "issue_ms": issue_ms,
           "mlups": e.updates_per_step * steps / wall / 1e6,
           "mlups_runs": [e.updates_per_step * steps / w / 1e6 for w in walls],
           "exchange_share": (exch / step_ms) if exch is not None else 0.0}
    del e
    _release(backend)
    return row


def _release(backend) -> None:
    """Give the memory pools of every device back (the next cell may be larger)."""
    if not backend.is_gpu:
        return
    import gc

    cp = backend.xp
    gc.collect()
    for d in range(cp.cuda.runtime.getDeviceCount()):
        with cp.cuda.Device(d):
            cp.get_default_memory_pool().free_all_blocks()


def scale_rows(backend, parts_list=(1, 2, 4), overlaps=("off", "on"), steps: int | None = None,
               min_time: float = 0.5, only: tuple[str, ...] = ()) -> list[dict]:
    """The table's rows. ``only``: cells whose "mode-family" label contains one of the texts."""
    if not backend.is_gpu and steps is None:
        steps = 5
    rows = []
    weak_base = {}
    for mode, fams in sizes(backend.is_gpu).items():
        for family, size in fams.items():
            label = f"{mode}-{family}"
            if only and not any(t in label for t in only):
                continue
            base, base_note = None, None
            for n in parts_list:
                for overlap in overlaps:
                    if n == 1 and overlap == "on":
                        continue
                    s = list(size)
                    if mode == "weak":
                        s[-1] = size[-1] * n  # the slowest axis grows with N: fixed size per sub-domain
                    try:
                        row = measure(family, tuple(s), n, overlap, backend, min_time, steps=steps)
                    except OutOfMemory as exc:  # one device's memory (weak N sub-domains, or 16384² on one GPU)
                        print(f"bench scale: {mode} {family} {'x'.join(map(str, s))} N={n}: cannot run ({exc})",
                              flush=True)
                        continue
                    row["mode"] = mode
                    if n == 1:
                        base = row["mlups"]
                        if mode == "weak":
                            weak_base[family] = row["mlups"]
                    if base is None and mode == "strong" and family in weak_base:
                        # The whole strong grid did not fit one device: the baseline is one device's
                        # MLUPS at the weak-scaling size (both saturate the memory bandwidth); said so.
                        base, base_note = weak_base[family], "baseline: the weak N=1 cell (grid too large for one GPU)"
                    # MLUPS over (one device's MLUPS × the devices used): weak and strong alike
                    row["efficiency"] = row["mlups"] / (base * row["devices"]) if base else None
                    if base_note:
                        row["note"] = base_note
                    rows.append(row)
                    print(f"bench scale: {mode} {family} {row['grid']} N={n} overlap={overlap}: "
                          f"{row['mlups']:.0f} MLUPS, efficiency {row['efficiency']}, exchange {row['exchange_ms']} ms "
                          f"of {row['step_ms']:.3f} ms/step (host issue {row['issue_ms']:.3f} ms/step)", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| mode | family | grid | N | overlap | transport | devices | MLUPS (median of 3) | ms/step | "
           "efficiency | exchange alone, ms (share) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eff = f"{r['efficiency']:.3f}" if r["efficiency"] is not None else "-"
        if r.get("note"):
            eff += "*"
        ex = "-" if r.get("exchange_ms") is None else f"{r['exchange_ms']:.3f} ({r['exchange_share']:.1%})"
        out.append(f"| {r['mode']} | {r['family']} | {r['grid']} | {r['parts']} | {r['overlap']} | {r['transport']} | "
                   f"{r['devices']} | {r['mlups']:.1f} | {r.get('step_ms', 0):.3f} | {eff} | {ex} |")
    if any(r.get("note") for r in rows):
        out.append("")
        out.append("\\* " + next(r["note"] for r in rows if r.get("note")))
    return "\n".join(out)


def main(argv=None, backend_name: str = "auto") -> int:
    ap = argparse.ArgumentParser(prog="nagare bench scale")
    ap.add_argument("--parts", type=int, action="append", help="sub-domain counts (default 1, 2, 4)")
    ap.add_argument("--steps", type=int, help="steps per timed run (default: enough for --min-time)")
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds per timed run (3 runs a cell)")
    ap.add_argument("--only", action="append", default=[], help="cells whose mode-family label contains TEXT, "
                    "e.g. weak-lbm2d, strong, diffusion3d (repeatable)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    backend = get_backend(backend_name)
    rows = scale_rows(backend, tuple(args.parts or (1, 2, 4)), steps=args.steps, min_time=args.min_time,
                      only=tuple(args.only))
    table = markdown(rows)
    print(table)
    if args.json:
        info = backend.device_info().as_dict()
        if backend.is_gpu:
            info["visible_gpus"] = backend.xp.cuda.runtime.getDeviceCount()
        return write_scale_results(args.json, backend.name, info, rows, table)
    return 0


@output_writer("the scaling benchmark's results")
def write_scale_results(json_path: str, backend_name: str, info: dict, rows: list, table: str) -> int:
    """FILE.json and FILE.md, each written whole or not at all; 4 (one line) if one cannot be."""
    from pathlib import Path

    path = Path(json_path)
    head = (f"# nagare bench scale ({time.strftime('%Y-%m-%d')})\n\n{info.get('visible_gpus', 1)} × "
            f"{info.get('name')} · driver "
            f"{info.get('driver_version')} · CuPy {info.get('cupy_version')} · backend {backend_name}\n\n")
    try:
        write_text_atomic(path, json.dumps({"backend": backend_name, "device": info,
                                            "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
        write_text_atomic(path.with_suffix(".md"), head + table + "\n")
    except ExportError as exc:
        print(f"nagare bench scale: NOT WRITTEN: {exc}", file=sys.stderr)
        return 4
    print(f"wrote {path} and {path.with_suffix('.md').name}")
    return 0

"""``nagare bench scale``: weak and strong scaling of the decomposed families (a skeleton).

Weak scaling keeps the size per sub-domain fixed (issue 20: 8192² lbm2d, 512³ diffusion3d per GPU)
and grows the slowest axis with N; strong scaling splits one grid (16384² lbm2d). Each row: MLUPS,
efficiency and the exchange's share of the step time (overlap off; with overlap on the exchange is
hidden inside the step phase). Devices: NCCL over N GPUs when N are visible, else N sub-domains on
the one device (or NumPy) — then the efficiency is against one device doing all the work (ideal
1.0: the decomposition's own overhead), and the table says so in its ``devices`` column.
On NumPy the sizes are small stand-ins; absolute numbers only from a GPU (DESIGN.md §8).
"""
from __future__ import annotations

import argparse
import json
import time

from ..backend import get_backend
from ..contract import OutOfMemory
from ..families import engine_class
from ..presets import validate

GPU_SIZES = {"weak": {"lbm2d": (8192, 8192), "diffusion3d": (512, 512, 512)}, "strong": {"lbm2d": (16384, 16384)}}
CPU_SIZES = {"weak": {"lbm2d": (128, 64), "diffusion3d": (32, 32, 16)}, "strong": {"lbm2d": (256, 128)}}


def _preset(family: str, size, parts: int, overlap: str, backend_name: str):
    grid = dict(zip(("nx", "ny", "nz"), size))
    raw = {"engine": family, "description": f"bench scale {family}", "grid": grid,
           "decomp": {"parts": parts, "overlap": overlap}}
    if family == "lbm2d":
        raw["physics"] = {"tau": 0.8}
        raw["initial"] = {"kind": "taylor-green"}
    return validate(raw, f"bench scale {family}", backend_name)


def measure(family: str, size, parts: int, overlap: str, backend, steps: int) -> dict:
    preset = _preset(family, size, parts, overlap, backend.name)
    e = engine_class(family)(preset, backend)
    e.step(2)  # warm-up: compile, tune nothing yet, first exchange
    e.synchronize()
    e.batch_report(wait=True)
    t0 = time.perf_counter()
    e.step(steps)
    e.synchronize()
    wall = time.perf_counter() - t0
    rep = e.batch_report(wait=True)
    total = sum(rep.phase_ms_per_step.values()) or 1.0
    transport = getattr(e, "transport", None)
    devices = parts if transport is not None and transport.name == "nccl" else 1
    return {"family": family, "grid": "x".join(map(str, size)), "parts": parts, "overlap": overlap,
            "transport": transport.name if transport is not None else "-", "devices": devices,
            "mlups": e.updates_per_step * steps / wall / 1e6,
            "exchange_share": rep.phase_ms_per_step.get("exchange", 0.0) / total}


def scale_rows(backend, parts_list=(1, 2, 4), overlaps=("off", "on"), steps: int | None = None) -> list[dict]:
    sizes = GPU_SIZES if backend.is_gpu else CPU_SIZES
    steps = steps or (50 if backend.is_gpu else 5)
    rows = []
    for mode, fams in sizes.items():
        for family, size in fams.items():
            base = None
            for n in parts_list:
                for overlap in overlaps:
                    if n == 1 and overlap == "on":
                        continue
                    s = list(size)
                    if mode == "weak":
                        s[-1] = size[-1] * n  # the slowest axis grows with N: fixed size per sub-domain
                    try:
                        row = measure(family, tuple(s), n, overlap, backend, steps)
                    except OutOfMemory as exc:  # weak scaling on one device: N sub-domains' worth
                        print(f"bench scale: {mode} {family} N={n}: cannot run ({exc})")
                        continue
                    row["mode"] = mode
                    if n == 1:
                        base = row["mlups"]
                    # MLUPS over (one device's MLUPS × the devices used): weak and strong alike
                    row["efficiency"] = row["mlups"] / (base * row["devices"]) if base else None
                    rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| mode | family | grid | N | overlap | transport | devices | MLUPS | efficiency | exchange share |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        out.append(f"| {r['mode']} | {r['family']} | {r['grid']} | {r['parts']} | {r['overlap']} | {r['transport']} | "
                   f"{r['devices']} | {r['mlups']:.1f} | {eff} | {r['exchange_share']:.0%} |")
    return "\n".join(out)


def main(argv=None, backend_name: str = "auto") -> int:
    ap = argparse.ArgumentParser(prog="nagare bench scale")
    ap.add_argument("--parts", type=int, action="append", help="sub-domain counts (default 1, 2, 4)")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    backend = get_backend(backend_name)
    rows = scale_rows(backend, tuple(args.parts or (1, 2, 4)), steps=args.steps)
    table = markdown(rows)
    print(table)
    if args.json:
        from pathlib import Path

        from ..atomic import make_folder, write_text_atomic

        info = backend.device_info().as_dict()
        path = Path(args.json)
        make_folder(path.parent)
        write_text_atomic(path, json.dumps({"backend": backend.name, "device": info,
                                            "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
        head = (f"# nagare bench scale ({time.strftime('%Y-%m-%d')})\n\n{info.get('name')} · driver "
                f"{info.get('driver_version')} · CuPy {info.get('cupy_version')} · backend {backend.name}\n\n")
        write_text_atomic(path.with_suffix(".md"), head + table + "\n")
        print(f"wrote {path} and {path.with_suffix('.md').name}")
    return 0

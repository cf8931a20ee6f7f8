"""Launch-shape sweep of the single-step fused D2Q9 kernels on one GPU (picks FUSED_LAUNCH).

    python -m nagare.engine.lbm2d.fused_bench --n 1024,4096 [--storages native,fp16] [--copy-gbs 4250]

Scene: P1's Poiseuille case (walls top/bottom, periodic x, body force), fp32, from the engine's
initial state plus a step of warm-up. For each (storage, threads x × y, nodes per thread) the
fused kernel is launched ``--steps`` times between two CUDA events (ping-pong as the engine does),
``--repeats`` times; the median is reported, with the spread (max/min − 1) so noise is visible.
AA streaming and CUDA-graph replay (the engine's own ``graph`` path) are timed at the engine's
chosen shape. Bytes per update: 72 (fp32 storage), 36 (fp16 storage).
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from ..backend import get_backend
from ..presets import load_preset
from . import engine as lbm
from . import launch as launch_config

SHAPES = [((64, 4, 1), 1), ((128, 2, 1), 1), ((256, 1, 1), 1), ((64, 4, 1), 2), ((128, 2, 1), 2),
          ((256, 1, 1), 2)]
SHAPES += [(block, "vec2") for block in ((32, 4, 1), (64, 2, 1), (64, 4, 1), (128, 1, 1), (128, 2, 1), (256, 1, 1),
                                         (64, 1, 1), (96, 1, 1), (192, 1, 1))]
SHAPES += [(block, "vec4") for block in ((32, 2, 1), (32, 4, 1), (64, 1, 1), (64, 2, 1), (128, 1, 1), (32, 1, 1),
                                         (96, 1, 1))]
SHAPES += [(block, "vec8") for block in ((32, 1, 1), (32, 2, 1), (64, 1, 1), (32, 4, 1))]
# fp16 only: lbm_fused_packed (populations two to a register from load to store)
SHAPES += [(block, "packed8") for block in ((32, 1, 1), (32, 2, 1), (64, 1, 1), (128, 1, 1))]
SHAPES += [(block, "packed4") for block in ((32, 2, 1), (64, 1, 1), (128, 1, 1))]
# fp16 only: lbm_fused_pipe (packed, rows through a cp.async pipeline), runs of 8 / 16 / 32 rows
SHAPES += [(block, f"pipe{stages}r{rows}") for block in ((32, 1, 1), (64, 1, 1), (128, 1, 1)) for stages in (2, 3)
           for rows in (8, 16, 32)]
# Cache-hint builds of the fused kernels (lbm2d.cu ld_pop / st_pop): evict-first loads and/or stores.
# Register caps (--maxrregcount) trade spills for occupancy (more loads in flight).
HINTS = {"default": None, "none": (), "ld.cs": ("-DNAGARE_LD_CS",), "st.cs": ("-DNAGARE_ST_CS",),
         "ld+st.cs": ("-DNAGARE_LD_CS", "-DNAGARE_ST_CS"), "rreg64": ("--maxrregcount=64",),
         "rreg72": ("--maxrregcount=72",), "rreg56": ("--maxrregcount=56",), "rreg80": ("--maxrregcount=80",),
         "rreg88": ("--maxrregcount=88",), "rreg96": ("--maxrregcount=96",),
         "rreg104": ("--maxrregcount=104",), "rreg112": ("--maxrregcount=112",),
         "rreg128": ("--maxrregcount=128",), "rreg168": ("--maxrregcount=168",),
         # approximate fp32 division (1/ρ: a few ulp, far below fp16 storage's rounding) and flush-to-zero
         "fastdiv": ("--prec-div=false",), "ftz": ("--ftz=true",),
         "rreg64+cs": ("--maxrregcount=64", "-DNAGARE_LD_CS", "-DNAGARE_ST_CS"),
         "rreg68+cs": ("--maxrregcount=68", "-DNAGARE_LD_CS", "-DNAGARE_ST_CS"),
         "rreg72+cs": ("--maxrregcount=72", "-DNAGARE_LD_CS", "-DNAGARE_ST_CS"),
         "rreg80+cs": ("--maxrregcount=80", "-DNAGARE_LD_CS", "-DNAGARE_ST_CS"),
         "rreg72+ld.cs": ("--maxrregcount=72", "-DNAGARE_LD_CS"),
         "rreg72+st.cs": ("--maxrregcount=72", "-DNAGARE_ST_CS")}


def hint_options(hint: str):
    """NVRTC options of a --hints entry: a name of HINTS, or names and rregN caps joined by "+"
    (e.g. "rreg152+fastdiv"); None for the engine's own options."""
    if hint in HINTS:
        return HINTS[hint]
    opts = []
    for part in hint.split("+"):
        if part.startswith("rreg") and part[4:].isdigit():
            opts.append(f"--maxrregcount={int(part[4:])}")
        elif HINTS.get(part):
            opts.extend(HINTS[part])
        else:
            raise KeyError(part)
    return tuple(opts)


def shape_label(launch) -> str:
    return f"{launch[0][0]}x{launch[0][1]}n{launch[1]}"


def parse_shape(label: str):
    """The launch of a shape label BXxBYnMODE (shape_label's inverse), e.g. 64x1npipe2r8."""
    dims, _, mode = label.partition("n")
    bx, by = (int(v) for v in dims.split("x"))
    return ((bx, by, 1), int(mode) if mode.isdigit() else mode)


def grid_size(text: str) -> tuple[int, int]:
    """"N" (square) or "NXxNY" of --n."""
    nx, _, ny = text.partition("x")
    return int(nx), int(ny or nx)


def make_engine(n, variants: dict, launch=None):
    """``n``: a square side or an (nx, ny) pair."""
    if launch is not None:
        launch_config.FUSED_LAUNCH[variants.get("storage", "native")] = launch
    nx, ny = (n, n) if isinstance(n, int) else n
    preset = load_preset("lbm2d-poiseuille", [f"grid.nx={nx}", f"grid.ny={ny}"], backend=None)
    return lbm.LBM2D(preset, get_backend("cupy"), variants={"kernel": "fused", **variants})


def time_engine(cp, e, steps: int, repeats: int) -> list[float]:
    """Seconds per step of `repeats` timed runs of `steps` steps (one warm-up run first); with the
    graph variant the engine's stepper replays CUDA graphs."""
    def run():
        with e.on_stream():  # launches (and graph capture) on the engine's stream, as Engine.step does
            e.stepper.advance(e.state, steps)  # a CUDA-graph launch per batch with the graph variant

    run()
    out = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(e.stream)
        run()
        stop.record(e.stream)
        stop.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / steps)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1024,4096", help="grid sizes, comma-separated: N (square) or NXxNY")
    ap.add_argument("--storages", default="native,fp16")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--copy-gbs", type=float, default=0.0, help="measured copy bandwidth (GB/s) for % roofline")
    ap.add_argument("--no-extras", action="store_true", help="only the fused shapes (no graph / AA rows)")
    ap.add_argument("--shapes", default="", help="shapes as BXxBYnMODE, e.g. 64x4n1,128x1nvec2,64x1npipe2r16")
    ap.add_argument("--hints", default="default",
                    help=f"NVRTC option sets to time (default: the engine's), of {','.join(HINTS)}")
    args = ap.parse_args(argv)
    unknown = []
    for h in args.hints.split(","):
        try:
            hint_options(h)
        except KeyError:
            unknown.append(h)
    if unknown:
        ap.error(f"unknown --hints {', '.join(unknown)}; known: {', '.join(HINTS)}")
    import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    shapes = [parse_shape(label) for label in args.shapes.split(",")] if args.shapes else SHAPES
    default = dict(launch_config.FUSED_LAUNCH)
    print("n\tstorage\thints\tvariant\tshape\tms/step\tMLUPS\tGB/s\t%roofline\tspread%\tregs", flush=True)
    runs = [(n, storage, hint) for n in args.n.split(",") for storage in args.storages.split(",")
            for hint in args.hints.split(",")]
    default_options = dict(launch_config.FUSED_OPTIONS)
    for n, storage, hint in runs:
        key = (storage, "float")  # the bench's scene is fp32 (fp16 storage computes in fp32)
        launch_config.FUSED_OPTIONS.clear()  # the dict single_step reads
        launch_config.FUSED_OPTIONS.update(default_options)
        if hint != "default":
            launch_config.FUSED_OPTIONS[key] = hint_options(hint)
        bpu = 36 if storage == "fp16" else 72
        cells = [(f"fused {shape_label(s)}", s, {}, False) for s in shapes]
        if not args.no_extras and hint == "default":
            cells += [("fused graph", default[storage], {"graph": "on"}, True),
                      ("aa", default[storage], {"streaming": "aa"}, False),
                      ("aa graph", default[storage], {"streaming": "aa", "graph": "on"}, True)]
        for label, launch, extra, _graph in cells:
            try:
                e = make_engine(grid_size(n), {"storage": storage, **extra}, launch)
                times = time_engine(cp, e, args.steps, args.repeats)
            except Exception as exc:  # a shape that cannot launch is a row, not a crash
                print(f"{n}\t{storage}\t{hint}\t{label}\t\tcannot run: {type(exc).__name__}: {exc}", flush=True)
                continue
            finally:
                launch_config.FUSED_LAUNCH.update(default)
            med = statistics.median(times)
            nx, ny = grid_size(n)
            mlups = nx * ny / med / 1e6
            gbs = mlups * 1e6 * bpu / 1e9
            pct = f"{100 * gbs / args.copy_gbs:.1f}" if args.copy_gbs else ""
            spread = 100 * (max(times) / min(times) - 1)
            shape = shape_label(launch)
            kernels = getattr(e.stepper, "k", {})
            regs = getattr(kernels["fused"], "num_regs", "") if "fused" in kernels else ""
            print(f"{n}\t{storage}\t{hint}\t{label}\t{shape}\t{med * 1e3:.4f}\t{mlups:.0f}\t{gbs:.0f}\t{pct}"
                  f"\t{spread:.1f}\t{regs}", flush=True)
            e = None
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

"""lbm2d's test and bench cases: the registry test's presets and companions, and what ``nagare
bench lbm2d`` measures (the cases, the cells, the batch and the precompile hook)."""
from __future__ import annotations

from .. import cuda
from ..benchspec import BenchSpec
from . import temporal_blocking as tb
from . import variants
from .config import LBM2DPreset


def equivalence_presets():
    base = {"engine": variants.FAMILY, "description": "equivalence test"}
    return {
        # Walls top/bottom, periodic in x, a circular obstacle and a body force (P1's setting + obstacle).
        "fp32-walls-obstacle": LBM2DPreset.model_validate({
            **base, "grid": {"nx": 48, "ny": 40}, "physics": {"tau": 0.7, "force": [2e-5, 1e-6]},
            "boundaries": {"y": "walls"}, "obstacle": {"kind": "circle", "diameter": 9, "center": [0.4, 0.45]}}),
        # Closed cavity with a moving lid and a rectangle, fp64.
        "fp64-cavity": LBM2DPreset.model_validate({
            **base, "grid": {"nx": 37, "ny": 33}, "physics": {"tau": 0.65, "precision": "fp64",
                                                             "lid_velocity": 0.05},
            "boundaries": {"x": "walls", "y": "lid"},
            "obstacle": {"kind": "rectangle", "width": 6, "height": 4, "center": [0.5, 0.4]}}),
        # TRT collision with a lid, a body force and an obstacle (single-step kernels only).
        "fp32-trt": LBM2DPreset.model_validate({
            **base, "grid": {"nx": 40, "ny": 34}, "physics": {"tau": 0.8, "collision": "trt",
                                                             "force": [1e-5, -2e-6], "lid_velocity": -0.04},
            "boundaries": {"y": "lid"}, "obstacle": {"kind": "circle", "diameter": 7, "center": [0.6, 0.4]}}),
        # Channel with inlet/outlet and a cylinder (single-step kernels only).
        "fp32-channel": LBM2DPreset.model_validate({
            **base, "grid": {"nx": 64, "ny": 30}, "physics": {"tau": 0.6, "inlet_velocity": 0.04},
            "boundaries": {"x": "inlet-outlet", "y": "walls"},
            "obstacle": {"kind": "circle", "diameter": 8, "center": [0.3, 0.5]}}),
    }


def equivalence_companions(axis, choice):
    """ts/tr/tile only act under a temporal-blocking kernel, and srtb needs tr ≥ 1: pair each
    choice with the kernel that exercises it, so the registry test checks a real launch."""
    if axis == "kernel" and choice in ("srtb", "srtb-ws"):
        return {"tr": "2"}
    if axis == "tile" and choice in variants.WAVE_TILE_CHOICES:
        return {"kernel": "wavefront"}
    if axis in ("ts", "tile"):
        return {"kernel": "stb"}
    if axis == "tr" and choice != "0":
        return {"kernel": "srtb", "ts": "8"}
    return {}


PRESET = "lbm2d-poiseuille"
# Steps per timed batch: a multiple of every ts, so a temporal-blocking variant runs only full
# ts-step launches (a batch of 10 at ts 4 ran 4 + 4 + 2 and charged every batch a short launch).
BENCH_BATCH = 16


def bench_cases(backend: str = "cupy"):
    sizes = [320, 1024, 4096, 8192] if backend != "numpy" else [64, 128, 256, 320]
    return [(f"{n}x{n}", [f"grid.nx={n}", f"grid.ny={n}"]) for n in sizes]


def bench_selections(backend: str = "cupy"):
    """two-kernel first (the speed-up baseline), the single-step ladder, then P1's grid
    (kernel × ts × tr × tile; configurations that cannot run are listed with the reason), then
    the wavefront kernel (ts × its tiles)."""
    if backend == "numpy":
        return [("reference", {"kernel": "reference"}),
                ("reference fp16", {"kernel": "reference", "storage": "fp16"})]
    out = [("two-kernel", {"kernel": "two-kernel"}), ("fused", {"kernel": "fused"}),
           ("fused graph", {"kernel": "fused", "graph": "on"}),
           ("fused aa", {"kernel": "fused", "streaming": "aa"}),
           ("fused aa graph", {"kernel": "fused", "streaming": "aa", "graph": "on"}),
           ("fused fp16", {"kernel": "fused", "storage": "fp16"}),
           ("fused fp16 aa graph", {"kernel": "fused", "storage": "fp16", "streaming": "aa", "graph": "on"})]
    for tile in ("8x8", "10x10", "16x16", "32x8"):  # 10x10: P1's best s8r0tb tile
        for ts in ("1", "2", "4", "8"):
            out.append((f"stb s{ts}r0tb {tile}", {"kernel": "stb", "ts": ts, "tr": "0", "tile": tile}))
            for tr in ("1", "2", "4", "8"):
                if int(tr) <= int(ts):
                    for k in ("srtb", "srtb-ws"):
                        out.append((f"{k} s{ts}r{tr}tb {tile}", {"kernel": k, "ts": ts, "tr": tr, "tile": tile}))
    for tile in variants.WAVE_TILE_CHOICES:  # beyond P1 (docs/lbm2d-temporal-blocking.md "wavefront")
        for ts in ("2", "4", "8"):
            out.append((f"wavefront ts{ts} {tile}", {"kernel": "wavefront", "ts": ts, "tr": "0", "tile": tile}))
    return out


def bench_precompile(selections: list[dict], preset, jobs: int) -> None:
    """Compile the temporal-blocking modules of ``selections`` (one NVRTC module per kernel, ts,
    tr and tile) in ``jobs`` processes before `nagare bench` times them (engine/cuda.py precompile)."""
    specs = [tb.kernel_spec(sel, preset.physics.dtype) for sel in selections
             if sel.get("kernel") in variants.TEMPORAL_BLOCKING and tb.unavailable_reason(sel, preset) is None]
    if specs:
        failed = cuda.precompile(specs, jobs)
        print(f"# precompiled {len(specs) - len(failed)} of {len(specs)} configurations in {jobs} processes",
              flush=True)


SPEC = BenchSpec(preset=PRESET, cases=bench_cases, selections=bench_selections,
                 grid_axes=("nx", "ny"),  # `nagare bench lbm2d --case NXxNY`: any grid size
                 batch=BENCH_BATCH, precompile=bench_precompile)

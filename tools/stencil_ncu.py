"""Launch the generated 7-point diffusion kernel at 512³ with a few launch configurations, for ncu.

    ncu --clock-control none --metrics dram__bytes.sum,gpu__time_duration.sum,\
sm__warps_active.avg.pct_of_peak_sustained_active python3 tools/stencil_ncu.py [--json stencil.json]

Configurations: the bench's best at 512³ and the best of each kernel shape (z-marching, plain, vec;
from ``--json``, if given), the vec kernel at (32,8,1)/4, (64,4,1)/32 z-marching and tile, the plain (128,2,1)
block and P2's fixed (128,1,1)/2, each launched twice (ncu reports every launch; the second is warm). Ideal DRAM traffic
per sweep: 8 B × 512³ = 1.074 GB; at a copy bandwidth of 4.25 TB/s (read + write) that is ≈ 0.25 ms.
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", help="stencil bench results (takes the 512³ best configuration)")
    p.add_argument("--n", type=int, default=512)
    args = p.parse_args()
    import cupy as cp
    from nagare.engine.stencil import Loop
    from nagare.engine.stencil.bench import cfg_label
    from nagare.engine.stencil.library import diffusion7

    configs = []
    if args.json:
        try:
            rows = json.load(open(args.json))["rows"]
            row = next(r for r in rows if r["mesh"] == f"{args.n}x{args.n}x{args.n}")
            for b in [row["best"], *row.get("best_by_shape", {}).values()]:
                plain = b.get("shape", "march") == "plain"
                cfg = {"bx": b["threads"][0], "by": b["threads"][1],
                       "zmarch": b["threads"][2] if plain else b["zmarch"], "shape": b.get("shape", "march")}
                if cfg not in configs:
                    configs.append(cfg)
        except (OSError, ValueError, KeyError, StopIteration) as exc:
            print(f"stencil_ncu: no best configuration from {args.json} ({exc})")
    configs += [{"bx": 32, "by": 8, "zmarch": 4, "shape": "vec"},
                {"bx": 64, "by": 4, "zmarch": 32, "shape": "march"},
                {"bx": 64, "by": 4, "zmarch": 32, "shape": "tile"},
                {"bx": 128, "by": 2, "zmarch": 1, "shape": "plain"},
                {"bx": 128, "by": 1, "zmarch": 2, "shape": "march"}]
    shape = (args.n,) * 3
    f = cp.asarray(np.random.default_rng(0).random(shape, dtype=np.float32))
    fn = cp.zeros_like(f)
    loop = Loop(diffusion7, shape, np.float32, engine="device", xp=cp)
    for cfg in configs:
        print(f"stencil_ncu: {cfg_label(cfg)} kernel {loop.unroll_of(cfg)} (2 launches)", flush=True)
        for _ in range(2):
            loop.run_with(cfg, f=f, fn=fn, r=0.1)
        cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

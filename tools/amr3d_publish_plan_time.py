"""What a tree change adds to amr3d's next published frame (issue 41): the sampling lattice, the plan of the
points the samples read and the ladder's gather indices, built for a preset's tree at its GPU size (the vortex
after its initial adaptation), the device synchronised; the median of five builds after a first one (CuPy's
elementwise kernels compile in it). A benchmark, not a test: speed is measured here, never asserted.

    python tools/amr3d_publish_plan_time.py [PRESET ...]   (default: amr3d-sphere-re100 amr3d-vortex-adapt)
"""
from __future__ import annotations

import sys
import time

import numpy as np
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset


def plan_ms(preset: str, builds: int = 6) -> str:
    be = get_backend("cupy")
    cp = be.xp
    e = AMR3D(load_preset(preset, backend="cupy"), be)
    shape, times = e.shape, []
    for _ in range(builds):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        shape.sampling = None
        p = shape.sampling_lattice()
        shape.stepper.gather_plan(p.points)
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    ms = 1e3 * float(np.median(times[1:]))
    return (f"{preset}: {e.forest.n_leaves} leaves, {int(np.prod(p.shape))} samples, {len(p.points)} points read: "
            f"plan {ms:.2f} ms a tree change (median of {builds - 1}; first {1e3 * times[0]:.1f} ms)")


def main(argv: list[str]) -> int:
    for preset in argv or ["amr3d-sphere-re100", "amr3d-vortex-adapt"]:
        print(plan_ms(preset), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""A/B of the compact scan kernel's compile-time variants on the GPU (CuPy): GB/s of the fused derivative
on n × n fields of x-lines (CUDA events, median of 40 launches) against a device copy of the same bytes,
each variant's output compared with the default build's bit for bit.

    python tools/scan_variants.py [N ...]            # default: 2048 4096

Variants: the engine's build (40 registers for 8-row chunks) and the same without the register bound
(figures: docs/benchmarks/compact-scan-h100-2026-11-26b and compact-scan-h100-2026-11-27).
"""
from __future__ import annotations

import sys

import numpy as np


def main(argv: list[str]) -> int:
    try:
        import cupy as cp
    except ImportError:
        print("scan_variants: needs CuPy and an NVIDIA GPU (pip install nagare[gpu])", file=sys.stderr)
        return 2
    from nagare.engine.compact import schemes, tridiag
    from nagare.engine.compact.solvers import scan
    from nagare.engine.cuda import DEFAULT_OPTIONS

    from nagare import shaders

    def timeit(fn, reps=40):
        for _ in range(3):
            fn()
        ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        ev[-1][1].synchronize()
        return float(np.median([cp.cuda.get_elapsed_time(a, b) for a, b in ev]))

    unbound = ("-DNAGARE_SCAN_MAX_THREADS=1024", "-DNAGARE_SCAN_MIN_BLOCKS=1")
    variants = [("default", ()), ("unbound", unbound)]
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(props["name"].decode(), "CuPy", cp.__version__, "driver", cp.cuda.runtime.driverGetVersion())
    src = shaders.source(scan.SOURCE)
    for n in [int(a) for a in argv] or [2048, 4096]:
        for dt in (np.float64, np.float32):
            f = cp.asarray(np.random.default_rng(1).standard_normal((n, n)).astype(dt))
            o = cp.empty_like(f)
            traffic = 2 * f.nbytes
            copy_ms = timeit(lambda o=o, f=f: cp.copyto(o, f))
            print(f"n={n} {np.dtype(dt).name}: copy {traffic / copy_ms / 1e6:.0f} GB/s")
            for bnd in schemes.BOUNDARIES:
                p = scan.plan(tridiag.factorise(*schemes.bands(n, bnd), bnd == "periodic"))
                fac = cp.asarray(p.packed().astype(dt))
                coef = cp.asarray(scan.coefficients(dt, 0.01))
                name = scan.kernel_name(dt, p.chunk, p.periodic, True, False)
                smem = p.shared_bytes(dt)
                args = (f, o, fac, coef, np.int32(n), np.int32(n), np.int64(n), np.int64(1), np.int32(p.t_lo),
                        np.int32(p.t_hi), np.int32(n), np.int64(0))
                cells, ref = [], None
                for label, opts in variants:
                    dyn = smem
                    try:
                        fn = cp.RawModule(code=src, options=DEFAULT_OPTIONS + scan.OPTIONS + opts,
                                          name_expressions=[name]).get_function(name)
                        if dyn > 48 * 1024:
                            fn.max_dynamic_shared_size_bytes = dyn
                        ms = timeit(lambda fn=fn, g=(n,), b=(p.team,), a=args, d=dyn: fn(g, b, a, shared_mem=d))
                    except Exception as exc:  # a variant that does not build or launch here
                        cells.append(f"{label}: {type(exc).__name__} {str(exc)[:200]}")
                        continue
                    if ref is None:
                        ref = o.copy()
                    elif not bool(cp.array_equal(o, ref)):
                        label += " (output differs!)"
                    cells.append(f"{label} r{fn.num_regs}: {traffic / ms / 1e6:.0f}")
                print(f"  {bnd} C={p.chunk} team={p.team}: " + ", ".join(cells) + " GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

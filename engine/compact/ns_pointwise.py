"""``pointwise = fused``: the pointwise part of the Navier–Stokes evaluation of dU/dt as three CUDA
kernels (shaders/cuda/compact/ns_pointwise.cu) instead of the ``array`` reference's dozens of CuPy
operations per evaluation (navier_stokes.py: primitives, fluxes, stresses, -(DF + DG) and the
characteristic boundary lines of nscbc.py, those on single lines: tiny launches).

Per evaluation: ``euler`` (u, v, T, p and the Euler fluxes), ``viscous`` (τ and its flux terms; skipped
for Euler) and ``combine`` (out = -(DF + DG) with every bounded side's boundary line finished in the same
launch) — 3 launches viscous, 2 inviscid. Per step, the RK4 stage arithmetic too (``rk4_first``,
``rk4_middle``, ``rk4_last``: 4 launches instead of the array code's 14). Every scalar is cast to the state's
dtype here as NumPy casts a Python float against an array of that dtype, and the kernels are compiled without
FMA contraction, so they repeat the NumPy arithmetic bit for bit (the CPU emulation checks it).

Launch shapes are plain Python so the emulation (tests/unit/test_compact_ns_fused.py) launches exactly
what the engine launches.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..cuda import KernelSpec, ctype, template
from . import nscbc

SOURCE = "cuda/compact/ns_pointwise.cu"
OPTIONS = ("--fmad=false",)  # the reference's products and sums stay separately rounded
BLOCK = 256
# side kinds as the kernel spells them (NAGARE_SIDE_*); periodic sides are not processed
SIDE_KIND = {"periodic": 0, "nscbc": 1, "extrapolate": 2, "hold": 3}
KERNELS = ("ns_euler", "ns_viscous", "ns_combine")
RK4_KERNELS = ("rk4_first", "rk4_middle", "rk4_last")  # the stage arithmetic: one launch a stage


def kernel_names(dtype) -> tuple[str, ...]:
    t = ctype(dtype)
    names = [template("ns_euler", t, v) for v in (False, True)]
    names += [template("ns_viscous", t)]
    names += [template("ns_combine", t, v) for v in (False, True)]
    names += [template(name, t) for name in RK4_KERNELS]
    return tuple(names)


@cache
def spec(dtype) -> KernelSpec:
    """The one NVRTC compilation holding the pointwise kernels for ``dtype``."""
    return KernelSpec(SOURCE, kernel_names(np.dtype(dtype)), OPTIONS)


def launch(npts: int) -> tuple[tuple[int], tuple[int]]:
    """One thread per grid point."""
    return ((npts + BLOCK - 1) // BLOCK,), (BLOCK,)


def launches_per_rate(viscous: bool) -> int:
    return 3 if viscous else 2


class FusedPointwise:
    """The kernels and their constant arguments for one Navier–Stokes problem (gas, sides, spacings)."""

    def __init__(self, *, shape, dtype, gas, sides: dict, h: dict, length: dict, sigma: float):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.with_viscous = gas.viscous
        ny, nx = self.shape
        self.npts = nx * ny
        self.grid, self.block = launch(self.npts)
        t = self.dtype.type
        sp = spec(self.dtype)
        c = ctype(self.dtype)
        self._euler = sp.function(template("ns_euler", c, self.with_viscous))
        self._viscous = sp.function(template("ns_viscous", c)) if self.with_viscous else None
        self._combine = sp.function(template("ns_combine", c, self.with_viscous))
        self._rk4 = {name: sp.function(template(name, c)) for name in RK4_KERNELS}
        self.rk4_grid, _ = launch(4 * self.npts)
        self._n4 = np.int64(4 * self.npts)
        n = np.int64(self.npts)
        # the casts of navier_stokes.NavierStokes.rate (t(...) of the Python values)
        self._euler_args = (t(gas.gamma - 1.0), t(gas.gamma), n)
        self._viscous_args = (t(gas.mu), t(gas.kappa), t(2.0 / 3.0), n)
        kinds = [np.int32(SIDE_KIND[sides[s]]) for s in nscbc.SIDES]
        # nscbc.normal_derivative's factor -s/h per side (a Python float there, cast against the line)
        scales = [t(-s / h[axis]) for axis, s in nscbc.SIDES.values()]
        self._combine_args = (np.int32(nx), np.int32(ny), *kinds, *scales, t(length["x"]), t(length["y"]),
                              *(t(w) for w in nscbc.ONE_SIDED), t(gas.gamma), t(sigma), t(gas.p_inf),
                              t(gas.gamma - 1.0))

    @staticmethod
    def _check(*arrays) -> None:
        for a in arrays:  # a kernel sees only the pointer: stacks must be whole C-contiguous arrays
            if not a.flags.c_contiguous:
                raise ValueError("fused pointwise kernels need C-contiguous stacks")

    def euler(self, U, P, p, F, G) -> None:
        """P = (u, v[, T]), p, F, G (Euler parts) from U."""
        self._check(U, P, p, F, G)
        self._euler(self.grid, self.block, (U, P, p, F, G) + self._euler_args)

    def viscous(self, P, GX, GY, tau, F, G) -> None:
        """τ = (τxx, τyy, τxy) from the gradients; F, G -= their viscous terms."""
        self._check(P, GX, GY, tau, F, G)
        self._viscous(self.grid, self.block, (P, GX, GY, tau, F, G) + self._viscous_args)

    def combine(self, U, P, p, tau, DF, DG, out) -> None:
        """out = -(DF + DG), the boundary lines as navier_stokes._boundaries leaves them."""
        self._check(U, P, p, tau, DF, DG, out)
        self._combine(self.grid, self.block, (U, P, p, tau, DF, DG, out) + self._combine_args)

    def launches(self) -> int:
        return launches_per_rate(self.with_viscous)

    # ---- the RK4 stages (the ``update`` phase of ns_engine.py: one launch a stage) ----
    def rk4_first(self, U, k, acc, tmp, c) -> None:
        """acc = k, tmp = k·c + U."""
        self._check(U, k, acc, tmp)
        self._rk4["rk4_first"](self.rk4_grid, self.block, (U, k, acc, tmp, c, self._n4))

    def rk4_middle(self, U, k, acc, tmp, two, c) -> None:
        """acc = acc + k·two, tmp = k·c + U."""
        self._check(U, k, acc, tmp)
        self._rk4["rk4_middle"](self.rk4_grid, self.block, (U, k, acc, tmp, two, c, self._n4))

    def rk4_last(self, U, k, acc, sixth) -> None:
        """U = U + (acc + k)·sixth."""
        self._check(U, k, acc)
        self._rk4["rk4_last"](self.rk4_grid, self.block, (U, k, acc, sixth, self._n4))

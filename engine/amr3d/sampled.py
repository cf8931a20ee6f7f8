"""A tree's moments on its sampling lattice (mesh.sampling), only those the shown field needs.

Every published frame of a tree shows a field on the sampling lattice: each sample is the
trilinear interpolant of 8 points of the finest leaf that holds it. The array code (NumPy, whose
reference rung holds the whole state) takes the moments asked for on every point and gathers the
corners by point id. The GPU reads only the points the samples read: a plan (built on the device
once per tree, with the sampling) keeps them, sorted, and each sample's 8 indices into them; a
frame gathers the populations there (no assembled state) and runs shaders/cuda/amr3d/sample.cu —
the moments, then the corners (and the speed) — two launches after the density's axis-0 sum,
where the array code issued ~200; the app's publishing worker is bound by issuing launches, each
needing the GIL that the UI thread holds while it draws.

Bit for bit what leafgrid.macroscopic on the whole state followed by the per-corner gather gave:
the same expressions (the kernels compiled with --fmad=false, every product and sum rounded on
its own) on every value, the density the same axis-0 sum of 27 rows in C order, so the fields on
screen are unchanged (tests/unit/test_amr3d_sampled.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..cuda import KernelSpec, template
from . import d3q27

MOMENTS = ("rho", "ux", "uy", "uz")


@dataclass
class SamplePlan:
    level: int  # the sampling lattice's level
    shape: tuple[int, int, int]  # (nz, ny, nx)
    unit: int  # finest-lattice units per sample spacing
    weights: object  # (8, P) trilinear weights in the engine's dtype (xp)
    ids: object = None  # array code: (8, P) canonical point ids of each sample's corners (xp, int64)
    points: object = None  # kernels: (U,) sorted distinct canonical point ids the samples read (xp, int64)
    local: object = None  # kernels: (8, P) the corners as indices into ``points`` (xp, int32 where it fits)


def plan(xp, smp, n_points: int, dtype, by_points: bool) -> SamplePlan:
    """The plan of a mesh.Sampling (its arrays on ``xp``) on a tree of ``n_points`` canonical points:
    for the array code the corners' point ids; ``by_points`` (the kernels) the distinct points read
    and each corner's index among them: a mark over the points and an index of the marked ones,
    array code on ``xp`` (on the GPU: device work, not the host's, each time the tree changes)."""
    ids = xp.asarray(smp.ids)
    out = SamplePlan(smp.level, smp.shape, smp.unit, xp.asarray(smp.weights, dtype=dtype))
    if not by_points:
        out.ids = ids
        return out
    read = xp.zeros(n_points, bool)
    read[ids.reshape(-1)] = True
    points = xp.flatnonzero(read)
    index_type = np.int32 if len(points) < 2**31 else np.int64
    index = xp.zeros(n_points, index_type)
    index[points] = xp.arange(len(points), dtype=index_type)
    out.points, out.local = points, index[ids]
    return out


def moments(xp, f, names=MOMENTS) -> dict:
    """The moments ``names`` (of rho, ux, uy, uz) of populations f[27, ...]: leafgrid.macroscopic's
    expressions, bit for bit (the velocity needs the density, which is always computed)."""
    # C order, as the whole state is: NumPy sums the rows of that one after another, while a
    # gather's result (F order) would be summed pairwise down each column (other bits)
    f = xp.ascontiguousarray(f)
    c = d3q27.C
    rho = f.sum(axis=0)
    out = {"rho": rho} if "rho" in names else {}
    for a, name in enumerate(("ux", "uy", "uz")):
        if name in names:
            out[name] = sum(int(c[q, a]) * f[q] for q in range(d3q27.Q) if c[q, a]) / rho
    return out


def sample(xp, p: SamplePlan, values, corners=None):
    """(nz, ny, nx) samples of a quantity: the 8 corners weighted and added in corner order
    (mesh.sampling's). ``values`` at every point of the tree, read through ``p.ids``, or at the
    points of ``corners`` (e.g. ``p.local`` for values at ``p.points``)."""
    w, index, flat = p.weights, p.ids if corners is None else corners, values.reshape(-1)
    v = w[0] * flat[index[0]]
    for k in range(1, 8):
        v = v + w[k] * flat[index[k]]
    return v.reshape(p.shape)


# ---- the GPU's two launches (shaders/cuda/amr3d/sample.cu) -------------------------------------
SOURCE = "cuda/amr3d/sample.cu"
MOMENTS_KERNEL, CORNERS_KERNEL = "amr3d_sample_moments", "amr3d_sample_corners"
BLOCK = 256


@cache
def kernel_spec(dtype) -> KernelSpec:
    """Both kernels for float32 or float64 values, with the velocity set as #define lines (its table
    stays in d3q27.py)."""
    t = np.dtype(dtype)
    prelude = "".join(f"#define AMR3D_SAMPLE_C{axis} {{{','.join(str(int(c)) for c in d3q27.C[:, a])}}}\n"
                      for a, axis in enumerate("XYZ"))
    return KernelSpec(SOURCE, (template(MOMENTS_KERNEL, t), template(CORNERS_KERNEL, t)), ("--fmad=false",),
                      prelude=prelude)


def gpu_supports(p: SamplePlan) -> bool:
    return p.local is not None and np.dtype(p.local.dtype) == np.dtype(np.int32) \
        and np.dtype(p.weights.dtype) in (np.dtype(np.float32), np.dtype(np.float64))


def gpu_samples(xp, p: SamplePlan, f, names=MOMENTS, speed: bool = False) -> tuple:
    """:func:`moments` then :func:`sample` of each name, bit for bit, as the density's sum and two
    kernel launches: (nz, ny, nx) arrays in the order of ``names`` (views of one (k, P) result).
    With ``speed`` (names: the three velocities) one array, sqrt(ux·ux + uy·uy + uz·uz) of the
    samples in that order (the speed field, without three more arrays and six launches)."""
    dtype = np.dtype(p.weights.dtype)
    f = xp.ascontiguousarray(f, dtype=dtype)  # C order: the density's sum as moments() takes it
    n = f.shape[1]
    rho = f.sum(axis=0)
    mask = sum(1 << MOMENTS.index(name) for name in set(names))
    order = [name for name in MOMENTS if name in names]  # the kernel's rows
    if speed and order != ["ux", "uy", "uz"]:
        raise ValueError("the speed takes the three velocities")
    at = xp.empty((len(order), n), dtype)
    spec = kernel_spec(dtype)
    spec.function(template(MOMENTS_KERNEL, dtype))(
        (max(1, -(-n // BLOCK)),), (BLOCK,), (f, rho, np.int64(n), np.int32(mask), at))
    samples = p.local.shape[1]
    out = xp.empty((1 if speed else len(order), samples), dtype)
    spec.function(template(CORNERS_KERNEL, dtype))(
        (max(1, -(-samples // BLOCK)),), (BLOCK,),
        (at, np.int64(n), np.int32(len(order)), p.local, p.weights, np.int64(samples), np.int32(speed), out))
    if speed:
        return (out[0].reshape(p.shape),)
    return tuple(out[order.index(name)].reshape(p.shape) for name in names)

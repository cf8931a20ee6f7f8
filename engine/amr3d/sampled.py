"""A tree's moments on its sampling lattice (mesh.sampling), computed where the samples read them.

Every published frame of a tree shows a field on the sampling lattice: each sample is the
trilinear interpolant of 8 points of the finest leaf that holds it. The moments are needed at
those points only, so a plan (built once per tree, with the sampling) keeps the sorted distinct
point ids the samples read and each sample's 8 indices into them; a frame gathers the populations
at those points (no assembled state), takes the moments asked for, and interpolates.

Bit for bit what leafgrid.macroscopic on the whole state followed by the per-corner gather gave:
the same floating-point operations in the same order on every value (the moments are pointwise;
the density is the same axis-0 sum of 27 rows), so the fields on screen are unchanged
(tests/unit/test_amr3d_sampled.py). What changes is the work: moments at the points read, not at
every point, and a few whole-array operations where there were a hundred and more (on the GPU the
publishing worker is bound by launches, each taking the GIL the UI thread also wants):

- the momentum of each axis from one gather of its 18 moving directions (sign × population),
  summed row after row in the order leafgrid's generator sum takes them (``0 + first``, then one
  row at a time);
- each sampled quantity from one gather of its 8 corners and one product with the weights, then
  the corners added in order.

On the GPU (:func:`gpu_samples`) the same arithmetic is two launches of shaders/cuda/amr3d/sample.cu
after the density's sum (compiled with --fmad=false: every product and sum rounded on its own, as
the array code's), so a published frame of a tree costs the populations' gather and four launches.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..cuda import KernelSpec, template
from . import d3q27

MOMENTS = ("rho", "ux", "uy", "uz")

# per axis, the directions with a non-zero velocity component (in q order, as leafgrid.macroscopic
# visits them) and that component's sign
_MOVING = [np.flatnonzero(d3q27.C[:, a]) for a in range(3)]
_SIGNS = [d3q27.C[q, a].astype(np.float64) for a, q in enumerate(_MOVING)]


@dataclass
class SamplePlan:
    level: int  # the sampling lattice's level
    shape: tuple[int, int, int]  # (nz, ny, nx)
    unit: int  # finest-lattice units per sample spacing
    points: object  # (U,) int64 sorted distinct canonical point ids the samples read (xp)
    local: object  # (8, P) each sample's corners as indices into ``points`` (xp, int32 where it fits)
    weights: object  # (8, P) trilinear weights in the engine's dtype (xp)
    host_points: np.ndarray  # ``points`` on the host (a ladder's per-level gather indices are built from them)


def plan(xp, smp, n_points: int, dtype) -> SamplePlan:
    """The plan of a mesh.Sampling on a tree of ``n_points`` canonical points (host work once per
    tree: a mark over the points and an index of the marked ones, no sort)."""
    ids = np.asarray(smp.ids)
    read = np.zeros(n_points, bool)
    read[ids.reshape(-1)] = True
    points = np.flatnonzero(read)
    index_type = np.int32 if len(points) < 2**31 else np.int64
    index = np.zeros(n_points, index_type)
    index[points] = np.arange(len(points), dtype=index_type)
    return SamplePlan(smp.level, smp.shape, smp.unit, xp.asarray(points), xp.asarray(index[ids]),
                      xp.asarray(smp.weights, dtype=dtype), points)


def moments(xp, f, names=MOMENTS) -> dict:
    """The moments ``names`` (of rho, ux, uy, uz) of populations f[27, U]: leafgrid.macroscopic's
    arithmetic, bit for bit (the velocity needs the density, which is always computed)."""
    # C order, as the whole state is: NumPy sums the rows of that one after another, while a
    # gather's result (F order) would be summed pairwise down each column (other bits)
    f = xp.ascontiguousarray(f)
    rho = f.sum(axis=0)
    out = {"rho": rho} if "rho" in names else {}
    for a, name in enumerate(("ux", "uy", "uz")):
        if name not in names:
            continue
        moving = xp.asarray(_SIGNS[a], dtype=f.dtype)[:, None] * f[xp.asarray(_MOVING[a])]  # (18, U)
        acc = 0 + moving[0]  # the generator sum's start, as leafgrid takes it
        for k in range(1, moving.shape[0]):
            acc = acc + moving[k]
        out[name] = acc / rho
    return out


def sample(xp, p: SamplePlan, values):
    """(nz, ny, nx) samples of a quantity given at the plan's points (U,): the 8 corners weighted
    and added in corner order (mesh.sampling's)."""
    corners = p.weights * values[p.local]
    v = corners[0]
    for c in range(1, corners.shape[0]):
        v = v + corners[c]
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
    return np.dtype(p.weights.dtype) in (np.dtype(np.float32), np.dtype(np.float64)) \
        and np.dtype(p.local.dtype) == np.dtype(np.int32)


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

"""Whole-array (vectorised) evaluation of a stencil with NumPy — or CuPy, it is written against ``xp``.

Each ``f[dx, dy, dz]`` becomes a shifted view; constants and parameters become scalars of the
array dtype, so every operation rounds exactly as the generated CUDA does (one op at a time, no
fused multiply-add), which makes the host and device loop engines agree bit for bit.

Boundaries:
- ``periodic``: every point is updated; neighbours wrap (a wrap-padded copy of each input).
- ``fixed``: only points at least ``halo`` away from every face are updated (P2's loop range
  minus the margins); the outputs' outer points are left untouched.
"""
from __future__ import annotations

import numpy as np

from .expr import Bin, Call, Const, Load, Neg, Node, Param, StencilError

BOUNDARIES = ("periodic", "fixed")

_XP_FUNCS = {"sqrt": "sqrt", "exp": "exp", "sin": "sin", "cos": "cos", "fabs": "abs",
             "fmin": "minimum", "fmax": "maximum"}


def update_region(shape, halo_xfirst, boundary) -> tuple[slice, ...]:
    """The slices (array order, z first) of the points a sweep updates."""
    if boundary == "periodic":
        return tuple(slice(0, n) for n in shape)
    return tuple(slice(h, n - h) for n, h in zip(shape, halo_xfirst[::-1]))


def evaluate(st, xp, arrays: dict, params: dict, boundary: str) -> None:
    """Apply the stencil once: read ``arrays[inputs]``, write ``arrays[outputs]`` in place."""
    first = arrays[st.inputs[0]] if st.inputs else arrays[st.outputs[0]]
    shape, dtype = first.shape, first.dtype
    halo = st.halo[::-1]  # array order
    scalar = dtype.type
    pvals = {k: scalar(v) for k, v in params.items()}
    if boundary == "periodic":
        used = {a for a, _ in st.loads}
        padded = {a: xp.pad(arrays[a], [(h, h) for h in halo], mode="wrap") for a in used}

        def view(a, off):
            o = off[::-1]
            return padded[a][tuple(slice(h + d, h + d + n) for h, d, n in zip(halo, o, shape))]
    else:
        def view(a, off):
            o = off[::-1]
            return arrays[a][tuple(slice(h + d, n - h + d) for h, d, n in zip(halo, o, shape))]

    cache: dict = {}

    def ev(node: Node):
        if isinstance(node, Const):
            return scalar(node.value)
        if isinstance(node, Param):
            return pvals[node.name]
        if isinstance(node, Load):
            key = (node.array, node.offset)
            if key not in cache:
                cache[key] = view(*key)
            return cache[key]
        if isinstance(node, Neg):
            return -ev(node.a)
        if isinstance(node, Bin):
            a, b = ev(node.a), ev(node.b)
            if node.op == "+":
                return a + b
            if node.op == "-":
                return a - b
            if node.op == "*":
                return a * b
            return a / b
        if isinstance(node, Call):
            return getattr(xp, _XP_FUNCS[node.fn])(*(ev(a) for a in node.args))
        raise TypeError(node)

    region = update_region(shape, st.halo, boundary)
    results = {o: ev(st.exprs[o]) for o in st.outputs}  # all reads before any write
    for o, v in results.items():
        arrays[o][region] = v


def check_arrays(st, arrays: dict, params: dict, shape=None, dtype=None, boundary="periodic"):
    """One-line errors for missing/extra names, shape or dtype mismatches and aliasing."""
    where = f"stencil '{st.name}'"
    names = st.inputs + st.outputs
    missing = [n for n in names if n not in arrays] + [p for p in st.params if p not in params]
    if missing:
        raise StencilError(f"{where}: missing argument(s) {', '.join(missing)}")
    extra = sorted(set(arrays) - set(names)) + sorted(set(params) - set(st.params))
    if extra:
        raise StencilError(f"{where}: unknown argument(s) {', '.join(extra)}; it takes "
                           f"{', '.join(names + st.params)}")
    shape = tuple(shape) if shape is not None else tuple(arrays[names[0]].shape)
    dtype = np.dtype(dtype) if dtype is not None else arrays[names[0]].dtype
    if len(shape) != st.ndim:
        raise StencilError(f"{where}: arrays are {len(shape)}D, the stencil is {st.ndim}D")
    for n in names:
        a = arrays[n]
        if tuple(a.shape) != shape or a.dtype != dtype:
            raise StencilError(f"{where}: array '{n}' is {a.dtype}{tuple(a.shape)}, expected {dtype}{shape}")
        if not a.flags.c_contiguous:
            raise StencilError(f"{where}: array '{n}' must be C-contiguous")
    for ax, n, h in zip("xyz", shape[::-1], st.halo):
        need = 2 * h + 1 if boundary == "fixed" else max(h, 1)
        if n < need:
            raise StencilError(f"{where}: {n} points along {ax} is too few for halo {h} ({boundary} needs ≥ {need})")
    for o in st.outputs:
        for i in st.inputs:
            if _shares(arrays[o], arrays[i]):
                raise StencilError(f"{where}: output '{o}' shares memory with input '{i}'; a sweep must write "
                                   f"to a separate buffer")
    return shape, dtype


def _shares(a, b) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    try:
        pa, pb = a.data.ptr, b.data.ptr
        return pa < pb + b.nbytes and pb < pa + a.nbytes
    except AttributeError:
        return a is b

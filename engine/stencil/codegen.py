"""CUDA C++ generated from a traced stencil, in P2's kernel shape.

3D: 2D thread blocks (bx, by) tile the xy-plane; each thread marches over ``zmarch``
consecutive z-planes (grid.z = ceil(nz / zmarch)). The x/y neighbour coordinates are computed
once per thread, only the z ones per plane. 2D: the same with y as the marched axis (each thread
of a (bx, by) block updates ``zmarch`` consecutive rows), so one launch space fits both.

The source is self-contained (no includes, NVRTC-friendly), uses ``extern "C"`` names, and
carries the user's expression as a comment on each output line; :func:`output_at_line` maps a
compiler line number back to the output (and the user's file:line) for error messages.
Shapes are runtime arguments, so one compiled kernel serves every grid size.
"""
from __future__ import annotations

import numpy as np

from .expr import Bin, Call, Const, Load, Neg, Node, Param, to_python

CTYPES = {np.dtype("float32"): "float", np.dtype("float64"): "double"}


def ctype(dtype) -> str:
    dt = np.dtype(dtype)
    if dt not in CTYPES:
        raise ValueError(f"stencils run in float32 or float64, not {dt}")
    return CTYPES[dt]


def kernel_name(st, dtype, boundary) -> str:
    return f"nagare_{st.name}_{boundary}_{ctype(dtype)}"


def _tok(o: int) -> str:
    return "0" if o == 0 else (f"p{o}" if o > 0 else f"m{-o}")


def _coord(axis: str, o: int) -> str:
    """Name of the coordinate variable of ``axis`` shifted by ``o``."""
    base = {"x": "i", "y": "j", "z": "k"}[axis]
    return base if o == 0 else f"{base}_{_tok(o)}"


def _load_var(array: str, off: tuple[int, ...]) -> str:
    return f"{array}__" + "_".join(_tok(o) for o in off)


def _c_const(v: float) -> str:
    r = repr(float(v))
    return f"(T)({r})"


def to_c(node: Node) -> str:
    if isinstance(node, Const):
        return _c_const(node.value)
    if isinstance(node, Param):
        return f"p_{node.name}"
    if isinstance(node, Load):
        return _load_var(node.array, node.offset)
    if isinstance(node, Bin):
        return f"({to_c(node.a)} {node.op} {to_c(node.b)})"
    if isinstance(node, Neg):
        return f"(-{to_c(node.a)})"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(to_c(a) for a in node.args)})"
    raise TypeError(node)


def generate(st, dtype, boundary: str) -> str:
    """The complete CUDA source of one stencil for one dtype and boundary kind."""
    periodic = boundary == "periodic"
    T = ctype(dtype)
    name = kernel_name(st, dtype, boundary)
    axes = ("x", "y", "z")[: st.ndim]
    sizes = {"x": "nx", "y": "ny", "z": "nz"}
    lo = {a: (0 if periodic else h) for a, h in zip(axes, st.halo)}
    march = axes[-1]  # z in 3D, y in 2D
    plane_axes = axes[:-1]

    args = [f"const T* __restrict__ in_{n}" for n in st.inputs]
    args += [f"T* __restrict__ out_{n}" for n in st.outputs]
    args += [f"const T p_{n}" for n in st.params]
    args += [f"const int {sizes[a]}" for a in axes] + ["const int zmarch"]

    offsets = {a: sorted({off[i] for _, off in st.loads if off[i] != 0}) for i, a in enumerate(axes)}

    def shifted(a, o, indent):
        v, n = {"x": "i", "y": "j", "z": "k"}[a], sizes[a]
        if periodic:
            return f"{indent}const int {_coord(a, o)} = nagare_wrap({v} {'+' if o > 0 else '-'} {abs(o)}, {n});"
        return f"{indent}const int {_coord(a, o)} = {v} {'+' if o > 0 else '-'} {abs(o)};"

    def index(coords: dict) -> str:
        if st.ndim == 3:
            return f"((long long){coords['z']} * ny + {coords['y']}) * nx + {coords['x']}"
        return f"(long long){coords['y']} * nx + {coords['x']}"

    L = []
    L.append(f"// nagare stencil '{st.name}' ({st.ndim}D, halo {st.halo}, {boundary} boundaries, {T})")
    L.append(f"// generated from {st.location}; view with `nagare stencil show {st.name}`.")
    L.append("// Kernel shape (P2): 2D thread blocks in the "
             + ("xy-plane, each thread marches over `zmarch` z-planes." if st.ndim == 3 else
                "plane, each thread marches over `zmarch` rows along y."))
    L.append(f"typedef {T} T;")
    if periodic:
        L.append("__device__ __forceinline__ int nagare_wrap(int v, int n) "
                 "{ return v < 0 ? v + n : (v >= n ? v - n : v); }")
    L.append("")
    L.append(f'extern "C" __global__ void {name}(')
    L.append("    " + ",\n    ".join(args) + ")")
    L.append("{")
    L.append(f"    const int i = {lo['x']} + (int)(blockIdx.x * blockDim.x + threadIdx.x);")
    if st.ndim == 3:
        L.append(f"    const int j = {lo['y']} + (int)(blockIdx.y * blockDim.y + threadIdx.y);")
        L.append(f"    if (i >= nx - {lo['x']} || j >= ny - {lo['y']}) return;")
        L.append(f"    const int k0 = {lo['z']} + (int)blockIdx.z * zmarch;")
        L.append(f"    const int k1 = min(k0 + zmarch, nz - {lo['z']});")
    else:
        L.append(f"    if (i >= nx - {lo['x']}) return;")
        L.append(f"    const int j0 = {lo['y']} + (int)(blockIdx.y * blockDim.y + threadIdx.y) * zmarch;")
        L.append(f"    const int j1 = min(j0 + zmarch, ny - {lo['y']});")
    for a in plane_axes:
        for o in offsets[a]:
            L.append(shifted(a, o, "    "))
    mv = {"z": "k", "y": "j"}[march]
    start, stop = ("k0", "k1") if march == "z" else ("j0", "j1")
    # Register queues along the marched axis: loads of one array at one in-plane offset with a
    # contiguous run of marched offsets (e.g. f[0,0,-1], f[0,0,0], f[0,0,+1]) are loaded once per
    # thread and shifted down the queue each step, so a step loads only the run's leading value.
    m = st.ndim - 1
    runs: dict = {}
    for arr, off in st.loads:
        runs.setdefault((arr, off[:m]), []).append(off[m])
    queues = {key: sorted(v) for key, v in runs.items() if len(v) > 1 and sorted(v) == list(range(min(v), max(v) + 1))}
    queued = {(arr, plane + (o,)) for (arr, plane), zs in queues.items() for o in zs}

    def load_expr(arr, off, march_coord):
        coords = {a: _coord(a, o) for a, o in zip(axes, off)}
        coords[march] = march_coord
        return f"in_{arr}[{index(coords)}]"

    def marched(base, o):
        if o == 0:
            return base
        expr = f"{base} {'+' if o > 0 else '-'} {abs(o)}"
        return f"nagare_wrap({expr}, {sizes[march]})" if periodic else f"({expr})"

    for (arr, plane), zs in queues.items():
        for o in zs[:-1]:
            L.append(f"    T {_load_var(arr, plane + (o,))} = {load_expr(arr, plane + (o,), marched(start, o))};")
        L.append(f"    T {_load_var(arr, plane + (zs[-1],))};")
    L.append(f"    for (int {mv} = {start}; {mv} < {stop}; ++{mv}) {{")
    loaded_here = {off[m] for arr, off in st.loads
                   if (arr, off) not in queued or off[m] == queues[(arr, off[:m])][-1]}
    for o in offsets[march]:
        if o in loaded_here:
            L.append(shifted(march, o, "        "))
    center = {a: {"x": "i", "y": "j", "z": "k"}[a] for a in axes}
    L.append(f"        const long long c = {index(center)};")
    for arr, off in st.loads:
        coords = {a: _coord(a, o) for a, o in zip(axes, off)}
        if (arr, off) in queued:
            if off[m] == queues[(arr, off[:m])][-1]:  # the leading value of a queue
                L.append(f"        {_load_var(arr, off)} = in_{arr}[{index(coords)}];")
            continue
        L.append(f"        const T {_load_var(arr, off)} = in_{arr}[{index(coords)}];")
    for o in st.outputs:
        L.append(f"        // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
        L.append(f"        out_{o}[c] = {to_c(st.exprs[o])};")
    for (arr, plane), zs in queues.items():
        for lo_o, hi_o in zip(zs[:-1], zs[1:]):
            L.append(f"        {_load_var(arr, plane + (lo_o,))} = {_load_var(arr, plane + (hi_o,))};")
    L.append("    }")
    L.append("}")
    return "\n".join(L) + "\n"


def output_at_line(source: str, line: int) -> str | None:
    """The output assigned on (or nearest above) 1-based ``line``, with its Python expression."""
    lines = source.splitlines()
    for n in range(min(line, len(lines)) - 1, -1, -1):
        text = lines[n].strip()
        if text.startswith("// output "):
            return text[len("// output "):]
        if text.startswith("extern"):
            break
    return None

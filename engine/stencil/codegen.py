"""CUDA C++ generated from a traced stencil, in P2's kernel shape.

3D: 2D thread blocks (bx, by) tile the xy-plane; each thread marches over ``zmarch``
consecutive z-planes (grid.z = ceil(nz / zmarch)). 2D: the same with y as the marched axis (each
thread of a (bx, by) block updates ``zmarch`` consecutive rows), so one launch space fits both.

How a thread marches (what makes the kernel bandwidth-bound rather than latency-bound):

- **Register queues along the marched axis.** Loads of one array at one in-plane offset with a
  contiguous run of marched offsets (``f[0,0,-1], f[0,0,0], f[0,0,+1]``) share a queue of
  registers: each plane loads only the run's leading value and the queue shifts. So each input
  point is loaded from DRAM once per thread; the x/y neighbours are other threads' centre values
  and come from L1/L2.
- **Unrolled march with the loads first.** Each kernel is generated for a fixed unroll ``U``
  (``_u1``, ``_u2``, ``_u4``, ``_u8``): one step of the march handles ``U`` planes and issues all
  of their loads (``U`` queue leads, ``U`` × the in-plane neighbours) before the first update, so
  ``U`` independent DRAM loads per thread are in flight instead of one. The loop picks the unroll
  from ``zmarch`` (:func:`unroll_for`); the remainder of a run and, with periodic boundaries, the
  planes whose marched neighbours wrap take a one-plane step with wrapped indices.
- **32-bit offsets, pointer increments.** The 64-bit address of the thread's column is formed
  once; every load of the unrolled step is ``p[const int offset]`` and the pointers advance by
  ``U`` planes per step. In-plane offsets (wrapped once per thread when periodic) are ints computed
  before the march; the loop checks that a plane times the march span fits in 32 bits.
- ``const T* __restrict__`` inputs and ``T* __restrict__`` outputs (read-only path, no aliasing, so
  the compiler may hoist the next step's loads above this step's stores).

The source is self-contained (no includes, NVRTC-friendly), uses ``extern "C"`` names, and
carries the user's expression as a comment on each output line; :func:`output_at_line` maps a
compiler line number back to the output (and the user's file:line) for error messages.
Shapes are runtime arguments, so one compiled kernel serves every grid size.

Besides the z-marching kernels the module holds the other kernel shapes the tuner chooses from:
``_plain`` (no march, one thread per point), ``_tile`` (3D, 2.5D blocking in shared memory) and
``_vec2`` / ``_vec4`` (3D, :func:`_vec_kernel`: a z-march where each thread owns V x-consecutive
points, loads every row it needs as one aligned vector and gets its x-neighbours from the adjacent
lanes by warp shuffles).
"""
from __future__ import annotations

import numpy as np

from .expr import Bin, Call, Const, Load, Neg, Node, Param, to_python

CTYPES = {np.dtype("float32"): "float", np.dtype("float64"): "double"}
UNROLLS = (1, 2, 4, 8)
PLAIN = "plain"  # the kernel variant without z-marching: one thread per point, 3D thread blocks
TILE = "tile"  # 2.5D blocking: a block marches over z, staging each plane's xy tile (+ halo) in shared memory
REGISTER_BUDGET = 64  # values held per thread by one unrolled step (loads in flight) before U is capped
VEC = "vec"  # the tuner's vector shape: the widest vector kernel (vec4, else vec2) the grid allows
VEC_WIDTHS = (4, 2)  # V of the generated vector kernels, preferred first


def ctype(dtype) -> str:
    dt = np.dtype(dtype)
    if dt not in CTYPES:
        raise ValueError(f"stencils run in float32 or float64, not {dt}")
    return CTYPES[dt]


def kernel_name(st, dtype, boundary, unroll: int | str = 1) -> str:
    """``…_u1`` … ``…_u8`` for the z-marching kernels, ``…_plain``, ``…_tile``, ``…_vec2`` and
    ``…_vec4`` for the other shapes."""
    if isinstance(unroll, str) and not unroll.isdigit():
        return f"nagare_{st.name}_{boundary}_{ctype(dtype)}_{unroll}"
    return f"nagare_{st.name}_{boundary}_{ctype(dtype)}_u{int(unroll)}"


def vec_variant(width: int) -> str:
    """The kernel variant (and explicit shape name) of the vector kernel of width V: ``"vec4"``."""
    return f"{VEC}{int(width)}"


def vec_widths(st) -> tuple[int, ...]:
    """The V of the vector kernels generated for ``st`` (ascending): 3D stencils whose x-halo is at
    most V (an x-neighbour is then at most one lane away, one shuffle)."""
    if st.ndim != 3:
        return ()
    return tuple(v for v in sorted(VEC_WIDTHS) if st.halo[0] <= v)


def kernel_variants(st) -> tuple:
    """Every kernel generated for ``st``: the unrolled z-marching kernels, the plain one and (3D
    only) the 2.5D-blocked tile kernel and the vector kernels (:func:`vec_widths`)."""
    return (unroll_variants(st) + (PLAIN,) + ((TILE,) if st.ndim == 3 else ())
            + tuple(vec_variant(v) for v in vec_widths(st)))


def vec_reason(st, shape, width: int) -> str | None:
    """Why the vector kernel of width V cannot run ``st`` on a grid of ``shape`` (array order, z
    first), or None. The launch adds two conditions of its own (engine/stencil/loops.py): whole
    warps in x (blockDim.x a multiple of 32) and every array aligned to V × itemsize bytes."""
    name = vec_variant(width)
    if st.ndim != 3:
        return (f"{VEC} shape: 3D stencils only (stencil '{st.name}' is {st.ndim}D; in 2D the rows are the "
                "coalesced axis of the z-marching kernel already)")
    hx = st.halo[0]
    if hx > width:
        return (f"{name} shape: x-halo {hx} > V = {width} (an x-neighbour must be at most one lane away: "
                "the shuffles exchange the adjacent lane's vector only)")
    nx = int(tuple(shape)[-1])
    if nx % width:
        return (f"{name} shape: nx = {nx} is not a multiple of V = {width} (each thread loads {width} "
                f"x-consecutive points as one aligned vector, so every row must start on a vector boundary)")
    return None


def vec_choice(st, shape) -> tuple[str | None, str | None]:
    """The vector kernel the ``vec`` shape runs on this grid — the widest V of :data:`VEC_WIDTHS`
    that can (:func:`vec_reason`) — as ``(variant, None)``, or ``(None, reasons)``."""
    reasons = []
    for v in VEC_WIDTHS:
        r = vec_reason(st, shape, v)
        if r is None:
            return vec_variant(v), None
        reasons.append(r)
    return None, "; ".join(dict.fromkeys(reasons))


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


def to_c(node: Node, names: dict | None = None) -> str:
    """C expression of ``node``; ``names`` maps (array, offset) to the variable holding the load."""
    if isinstance(node, Const):
        return _c_const(node.value)
    if isinstance(node, Param):
        return f"p_{node.name}"
    if isinstance(node, Load):
        return names[(node.array, node.offset)] if names is not None else _load_var(node.array, node.offset)
    if isinstance(node, Bin):
        return f"({to_c(node.a, names)} {node.op} {to_c(node.b, names)})"
    if isinstance(node, Neg):
        return f"(-{to_c(node.a, names)})"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(to_c(a, names) for a in node.args)})"
    raise TypeError(node)


def _layout(st):
    """Queues (array, in-plane offset) → contiguous marched offsets, and the other (direct) loads."""
    m = st.ndim - 1
    runs: dict = {}
    for arr, off in st.loads:
        runs.setdefault((arr, off[:m]), []).append(off[m])
    queues = {key: sorted(v) for key, v in runs.items()
              if len(v) > 1 and sorted(v) == list(range(min(v), max(v) + 1))}
    queued = {(arr, plane + (o,)) for (arr, plane), zs in queues.items() for o in zs}
    direct = [(arr, off) for arr, off in st.loads if (arr, off) not in queued]
    return queues, direct


def loads_per_plane(st) -> int:
    """Loads one plane of the march issues: the queue leads plus the direct loads."""
    queues, direct = _layout(st)
    return len(queues) + len(direct)


def unroll_variants(st) -> tuple[int, ...]:
    """The unrolls generated for ``st``: up to 8, fewer when one step would hold more than
    ``REGISTER_BUDGET`` loaded values (wide stencils would spill or lose too much occupancy)."""
    per = max(1, loads_per_plane(st))
    return tuple(u for u in UNROLLS if u == 1 or u * per <= REGISTER_BUDGET)


def unroll_for(st, zmarch: int) -> int:
    """The unroll a launch with ``zmarch`` planes per thread runs: the largest variant ≤ zmarch."""
    return max(u for u in unroll_variants(st) if u <= max(1, int(zmarch)))


def march_span(st) -> tuple[int, int]:
    """Lowest and highest marched offset any load uses."""
    m = st.ndim - 1
    zs = [off[m] for _, off in st.loads] or [0]
    return min(0, min(zs)), max(0, max(zs))


def generate(st, dtype, boundary: str, unrolls=None, plain: bool = True, tile: bool = True, vec: bool = True) -> str:
    """The complete CUDA source of one stencil for one dtype and boundary kind: one kernel per
    unroll in ``unrolls`` (default :func:`unroll_variants`) and, with ``plain``, the plain kernel
    (:func:`_plain_kernel`), with ``tile`` the tile kernel (3D) and with ``vec`` the vector kernels
    (:func:`vec_widths`), all with the same arguments."""
    T = ctype(dtype)
    unrolls = tuple(unrolls) if unrolls is not None else unroll_variants(st)
    L = []
    L.append(f"// nagare stencil '{st.name}' ({st.ndim}D, halo {st.halo}, {boundary} boundaries, {T})")
    L.append(f"// generated from {st.location}; view with `nagare stencil show {st.name}`.")
    L.append("// Kernel shape (P2): 2D thread blocks in the "
             + ("xy-plane, each thread marches over `zmarch` z-planes" if st.ndim == 3 else
                "plane, each thread marches over `zmarch` rows along y")
             + f"; one kernel per unroll U ∈ {{{', '.join(map(str, unrolls))}}}")
    L.append("// (U planes per step, all loads of a step issued before its updates).")
    L.append(f"typedef {T} T;")
    tile = tile and st.ndim == 3
    widths = vec_widths(st) if vec else ()
    if tile:
        L.append("extern __shared__ __align__(16) unsigned char nagare_smem[];  // the tile kernel's planes")
    for v in widths:
        b = v * np.dtype(dtype).itemsize
        L.append(f"struct alignas({b}) nagare_v{v} {{ T e[{v}]; }};  // {v} x-consecutive values, one {b}-byte "
                 f"access (the {vec_variant(v)} kernel)")
    if boundary == "periodic":
        L.append("__device__ __forceinline__ int nagare_wrap(int v, int n) "
                 "{ return v < 0 ? v + n : (v >= n ? v - n : v); }")
    if plain:
        L.append("// Plus the plain shape (`_plain`): no march, one thread per point, 3D thread blocks "
                 "(bx, by, bz = the launch's third number).")
    if tile:
        L.append("// Plus the tile shape (`_tile`): 2.5D blocking, each plane's xy tile + halo staged in shared "
                 "memory.")
    if widths:
        L.append(f"// Plus the vec shape (`_vec{'`, `_vec'.join(map(str, widths))}`, at the end): a z-march where each "
                 "thread owns V x-consecutive points,")
        L.append("// loads each row as one aligned vector and takes its x-neighbours from the adjacent lanes by warp "
                 "shuffles.")
    for u in unrolls:
        L.append("")
        L.extend(_kernel(st, dtype, boundary, u))
    if plain:
        L.append("")
        L.extend(_plain_kernel(st, dtype, boundary))
    if tile:
        L.append("")
        L.extend(_tile_kernel(st, dtype, boundary))
    for v in widths:
        L.append("")
        L.extend(_vec_kernel(st, dtype, boundary, v))
    return "\n".join(L) + "\n"


def _plain_kernel(st, dtype, boundary: str) -> list[str]:
    """The plain shape: one thread per point, no march, no register queue. A block is (bx, by, bz)
    threads (in 2D, bx × (by·bz) with the block's z folded into y); the grid covers every axis.
    Each load is ``in[c + d]`` with ``c`` the point's int32 index and ``d`` an int32 neighbour
    offset, formed per axis once (periodic: the wrapped offset, a select only at the faces). All
    neighbour reuse goes through L1/L2 (at 512² a z-plane is 1 MB, so the z±1 planes stay in L2
    and DRAM traffic stays ideal); few registers per thread give full occupancy to hide latency.
    The loop only launches it when the grid has fewer than 2³¹ points (int32 indices)."""
    periodic = boundary == "periodic"
    name = kernel_name(st, dtype, boundary, PLAIN)
    axes = ("x", "y", "z")[: st.ndim]
    sizes = {"x": "nx", "y": "ny", "z": "nz"}
    var = {"x": "i", "y": "j", "z": "k"}
    lo = {a: (0 if periodic else h) for a, h in zip(axes, st.halo)}
    stride = {"x": None, "y": "nx", "z": "nagare_plane"}
    args = [f"const T* __restrict__ in_{n}" for n in st.inputs]
    args += [f"T* __restrict__ out_{n}" for n in st.outputs]
    args += [f"const T p_{n}" for n in st.params]
    args += [f"const int {sizes[a]}" for a in axes] + ["const int zmarch"]
    offsets = {a: sorted({off[i] for _, off in st.loads if off[i] != 0}) for i, a in enumerate(axes)}

    def dname(a, o):
        return f"d{a}_{_tok(o)}"

    L = [f'extern "C" __global__ void {name}(', "    " + ",\n    ".join(args) + ")", "{",
         "    // zmarch is unused here (same arguments as the marching kernels)"]
    L.append(f"    const int i = {lo['x']} + (int)(blockIdx.x * blockDim.x + threadIdx.x);")
    if st.ndim == 3:
        L.append(f"    const int j = {lo['y']} + (int)(blockIdx.y * blockDim.y + threadIdx.y);")
        L.append(f"    const int k = {lo['z']} + (int)(blockIdx.z * blockDim.z + threadIdx.z);")
        L.append(f"    if (i >= nx - {lo['x']} || j >= ny - {lo['y']} || k >= nz - {lo['z']}) return;")
        L.append("    const int nagare_plane = nx * ny;")
        L.append("    const int c = (k * ny + j) * nx + i;  // int32: the loop checks nx*ny*nz < 2^31")
    else:
        L.append(f"    const int j = {lo['y']} + (int)((blockIdx.y * blockDim.z + threadIdx.z) * blockDim.y"
                 " + threadIdx.y);")
        L.append(f"    if (i >= nx - {lo['x']} || j >= ny - {lo['y']}) return;")
        L.append("    const int c = j * nx + i;")
    for a in axes:
        v, n = var[a], sizes[a]
        for o in offsets[a]:
            step = f"{o}" if o > 0 else f"({o})"
            if periodic:
                edge = f"{v} >= {n} - {o}" if o > 0 else f"{v} < {-o}"
                d = f"({edge}) ? {step} - {n} : {step}" if o > 0 else f"({edge}) ? {step} + {n} : {step}"
            else:
                d = step
            mul = "" if stride[a] is None else f" * {stride[a]}"
            L.append(f"    const int {dname(a, o)} = ({d}){mul};")
    names = {}
    for arr, off in st.loads:
        terms = ["c"] + [dname(a, o) for a, o in zip(axes, off) if o != 0]
        v = _load_var(arr, off)
        L.append(f"    const T {v} = in_{arr}[{' + '.join(terms)}];")
        names[(arr, off)] = v
    for o in st.outputs:
        L.append(f"    // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
        L.append(f"    out_{o}[c] = {to_c(st.exprs[o], names)};")
    L.append("}")
    return L


def _kernel(st, dtype, boundary: str, U: int) -> list[str]:
    periodic = boundary == "periodic"
    name = kernel_name(st, dtype, boundary, U)
    axes = ("x", "y", "z")[: st.ndim]
    sizes = {"x": "nx", "y": "ny", "z": "nz"}
    var = {"x": "i", "y": "j", "z": "k"}
    lo = {a: (0 if periodic else h) for a, h in zip(axes, st.halo)}
    march = axes[-1]  # z in 3D, y in 2D
    plane_axes = axes[:-1]
    m = st.ndim - 1
    mv, mn = var[march], sizes[march]
    queues, direct = _layout(st)
    zlo, zhi = march_span(st)

    args = [f"const T* __restrict__ in_{n}" for n in st.inputs]
    args += [f"T* __restrict__ out_{n}" for n in st.outputs]
    args += [f"const T p_{n}" for n in st.params]
    args += [f"const int {sizes[a]}" for a in axes] + ["const int zmarch"]

    offsets = {a: sorted({off[i] for _, off in st.loads if off[i] != 0}) for i, a in enumerate(axes)}

    def shifted(a, o, indent):
        v, n = var[a], sizes[a]
        if periodic:
            return f"{indent}const int {_coord(a, o)} = nagare_wrap({v} {'+' if o > 0 else '-'} {abs(o)}, {n});"
        return f"{indent}const int {_coord(a, o)} = {v} {'+' if o > 0 else '-'} {abs(o)};"

    def index(coords: dict) -> str:
        if st.ndim == 3:
            return f"((long long){coords['z']} * ny + {coords['y']}) * nx + {coords['x']}"
        return f"(long long){coords['y']} * nx + {coords['x']}"

    def marched(o):
        """The (wrapped) marched coordinate ``mv + o`` for the one-plane step."""
        if o == 0:
            return mv
        expr = f"{mv} {'+' if o > 0 else '-'} {abs(o)}"
        return f"nagare_wrap({expr}, {mn})" if periodic else f"({expr})"

    def full_index(arr_off, mc):
        _, off = arr_off
        coords = {a: _coord(a, o) for a, o in zip(axes, off)}
        coords[march] = mc
        return index(coords)

    def plane_off(off) -> str:
        return "o_" + "_".join(_tok(o) for o in off[:m])

    def slot(arr, plane, s) -> str:
        return f"{arr}__q_{'_'.join(_tok(o) for o in plane)}_s{s}"

    def fast_addr(arr, off, u) -> str:
        dz = u + off[m]
        po = plane_off(off)
        if dz == 0:
            return f"pin_{arr}[{po}]"
        return f"pin_{arr}[{po} + {dz} * nagare_plane]"

    in_plane = sorted({off[:m] for _, off in st.loads})

    L = []
    L.append(f'extern "C" __global__ void {name}(')
    L.append("    " + ",\n    ".join(args) + ")")
    L.append("{")
    L.append(f"    const int i = {lo['x']} + (int)(blockIdx.x * blockDim.x + threadIdx.x);")
    if st.ndim == 3:
        L.append(f"    const int j = {lo['y']} + (int)(blockIdx.y * blockDim.y + threadIdx.y);")
        L.append(f"    if (i >= nx - {lo['x']} || j >= ny - {lo['y']}) return;")
        L.append(f"    const int k0 = {lo['z']} + (int)blockIdx.z * zmarch;")
        L.append(f"    const int k1 = min(k0 + zmarch, nz - {lo['z']});")
        L.append("    const int nagare_plane = nx * ny;  // elements per z-plane (the loop checks it fits)")
        start, stop = "k0", "k1"
    else:
        L.append(f"    if (i >= nx - {lo['x']}) return;")
        L.append(f"    const int j0 = {lo['y']} + (int)(blockIdx.y * blockDim.y + threadIdx.y) * zmarch;")
        L.append(f"    const int j1 = min(j0 + zmarch, ny - {lo['y']});")
        L.append("    const int nagare_plane = nx;  // elements per row")
        start, stop = "j0", "j1"
    for a in plane_axes:
        for o in offsets[a]:
            L.append(shifted(a, o, "    "))
    # In-plane offsets relative to the thread's own column (wrapped once, here, when periodic).
    for po in in_plane:
        terms = []
        for a, o in zip(plane_axes, po):
            if o == 0:
                continue
            d = f"({_coord(a, o)} - {var[a]})"
            terms.append(d if a == "x" else f"{d} * nx")
        L.append(f"    const int {plane_off(po + (0,))} = {' + '.join(terms) if terms else '0'};")
    center = {a: var[a] for a in axes}
    center[march] = start
    L.append(f"    const long long nagare_base = {index(center)};")
    for n in st.inputs:
        L.append(f"    const T* __restrict__ pin_{n} = in_{n} + nagare_base;")
    for n in st.outputs:
        L.append(f"    T* __restrict__ pout_{n} = out_{n} + nagare_base;")
    # Queue slot s of (arr, plane) holds the value at marched coordinate mv + zs[0] + s.
    for (arr, plane), zs in queues.items():
        span = zs[-1] - zs[0]
        for s in range(span):
            at = _wrap_at(start, zs[0] + s, mn, periodic)
            L.append(f"    T {slot(arr, plane, s)} = in_{arr}[{full_index((arr, plane + (0,)), at)}];")
        for s in range(span, span + U):
            L.append(f"    T {slot(arr, plane, s)};")
    L.append(f"    int {mv} = {start};")
    L.append(f"    while ({mv} < {stop}) {{")
    cond = [f"{mv} + {U} <= {stop}"]
    if periodic:
        if zlo < 0:
            cond.append(f"{mv} - {-zlo} >= 0")
        cond.append(f"{mv} + {U - 1 + zhi} < {mn}")
    L.append(f"        if ({' && '.join(cond)}) {{")
    L.append(f"            // {U} plane(s): all loads first (int offsets from column pointers), then the updates")
    names_u = [dict() for _ in range(U)]
    for u in range(U):
        for (arr, plane), zs in queues.items():
            span = zs[-1] - zs[0]
            L.append(f"            {slot(arr, plane, span + u)} = {fast_addr(arr, plane + (zs[-1],), u)};")
            for z in zs:
                names_u[u][(arr, plane + (z,))] = slot(arr, plane, z - zs[0] + u)
        for arr, off in direct:
            v = f"{_load_var(arr, off)}_u{u}"
            L.append(f"            const T {v} = {fast_addr(arr, off, u)};")
            names_u[u][(arr, off)] = v
    for u in range(U):
        for o in st.outputs:
            L.append(f"            // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
            dst = f"pout_{o}[0]" if u == 0 else f"pout_{o}[{u} * nagare_plane]"
            L.append(f"            {dst} = {to_c(st.exprs[o], names_u[u])};")
    L.extend(_shift(queues, slot, U, "            "))
    for n in st.inputs + st.outputs:
        p = "pin" if n in st.inputs else "pout"
        L.append(f"            {p}_{n} += {U} * nagare_plane;")
    L.append(f"            {mv} += {U};")
    L.append("        } else {")
    L.append("            // one plane, with " + ("wrapped marched indices (periodic edges) or " if periodic else "")
             + "the remainder of the run")
    for o in offsets[march]:
        L.append(f"            const int {_coord(march, o)} = {marched(o)};")
    names1 = {}
    for (arr, plane), zs in queues.items():
        span = zs[-1] - zs[0]
        L.append(f"            {slot(arr, plane, span)} = in_{arr}"
                 f"[{full_index((arr, plane + (0,)), _coord(march, zs[-1]))}];")
        for z in zs:
            names1[(arr, plane + (z,))] = slot(arr, plane, z - zs[0])
    for arr, off in direct:
        v = _load_var(arr, off)
        L.append(f"            const T {v} = in_{arr}[{full_index((arr, off), _coord(march, off[m]))}];")
        names1[(arr, off)] = v
    for o in st.outputs:
        L.append(f"            // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
        L.append(f"            pout_{o}[0] = {to_c(st.exprs[o], names1)};")
    L.extend(_shift(queues, slot, 1, "            "))
    for n in st.inputs + st.outputs:
        p = "pin" if n in st.inputs else "pout"
        L.append(f"            {p}_{n} += nagare_plane;")
    L.append(f"            ++{mv};")
    L.append("        }")
    L.append("    }")
    L.append("}")
    return L


def tile_layout(st):
    """The tile kernel's plan: ``tiles`` = the (array, dz) planes staged in shared memory (arrays read
    at an x/y offset, one tile per marched offset they are read at) and ``queues`` = array → (zlo, zhi),
    the register queue along z of each array's own column (covering its (0, 0) loads and every tiled dz,
    so a thread's own tile element always comes from a register)."""
    tiles = sorted({(arr, off[2]) for arr, off in st.loads if off[:2] != (0, 0)})
    zs: dict = {}
    for arr, off in st.loads:
        if off[:2] == (0, 0):
            zs.setdefault(arr, set()).add(off[2])
    for arr, dz in tiles:
        zs.setdefault(arr, set()).add(dz)
    queues = {arr: (min(v), max(v)) for arr, v in sorted(zs.items())}
    return tiles, queues


def tile_smem_bytes(st, dtype, bx: int, by: int) -> int:
    """Dynamic shared memory of a tile launch: two buffers (double-buffered planes, one barrier per
    plane) × the staged tiles × (bx + 2hx)(by + 2hy) values."""
    if st.ndim != 3:
        return 0
    tiles, _ = tile_layout(st)
    hx, hy = st.halo[0], st.halo[1]
    return 2 * len(tiles) * (bx + 2 * hx) * (by + 2 * hy) * np.dtype(dtype).itemsize


def _tile_kernel(st, dtype, boundary: str) -> list[str]:
    """The 2.5D-blocked shape (3D only): a (bx, by) block owns an xy tile and marches over ``zmarch``
    planes. For each plane it stages, for every array read at an x/y offset, the (bx + 2hx)(by + 2hy)
    tile in shared memory (double-buffered: one ``__syncthreads`` per plane) — each element loaded once
    from global memory: a thread's own element from its register queue along z, the halo ring by the
    threads of the first hx columns / hy rows (left/right, top/bottom, corners), with the same periodic
    wrap / fixed range as the other kernels. x/y neighbours are then read from shared memory, z
    neighbours from the register queue, and the next plane's queue lead is loaded before the current
    plane's staging and update, so a DRAM load is always in flight. Threads outside the update range
    take part in staging (their own element may be another thread's halo) and in the barriers."""
    periodic = boundary == "periodic"
    name = kernel_name(st, dtype, boundary, TILE)
    hx, hy, hz = st.halo
    lo = {"x": hx, "y": hy, "z": hz} if not periodic else {"x": 0, "y": 0, "z": 0}
    tiles, queues = tile_layout(st)
    args = [f"const T* __restrict__ in_{n}" for n in st.inputs]
    args += [f"T* __restrict__ out_{n}" for n in st.outputs]
    args += [f"const T p_{n}" for n in st.params]
    args += ["const int nx", "const int ny", "const int nz", "const int zmarch"]

    def wrap(expr, n):
        return f"nagare_wrap({expr}, {n})" if periodic else f"({expr})"

    def zplane(o, k="k"):
        return k if o == 0 else wrap(f"{k} {'+' if o > 0 else '-'} {abs(o)}", "nz")

    def slot(arr, z):
        return f"q_{arr}_{_tok(z)}"

    def tname(arr, dz):
        return f"t_{arr}_{_tok(dz)}"

    L = [f'extern "C" __global__ void {name}(', "    " + ",\n    ".join(args) + ")", "{"]
    L.append(f"    const int hx = {hx}, hy = {hy};  // the declared x/y halos: tiles are (bx + 2hx) x (by + 2hy)")
    L.append("    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, bx = (int)blockDim.x, by = (int)blockDim.y;")
    L.append(f"    const int i = {lo['x']} + (int)blockIdx.x * bx + tx;")
    L.append(f"    const int j = {lo['y']} + (int)blockIdx.y * by + ty;")
    L.append(f"    const int xend = nx - {lo['x']}, yend = ny - {lo['y']};  // update range [lo, end) in x, y")
    L.append("    const bool active = i < xend && j < yend;")
    L.append(f"    const int k0 = {lo['z']} + (int)blockIdx.z * zmarch;")
    L.append(f"    const int k1 = min(k0 + zmarch, nz - {lo['z']});")
    L.append("    const int nagare_plane = nx * ny;")
    L.append("    const int tw = bx + 2 * hx, tsize = tw * (by + 2 * hy);  // tile row length, tile size")
    L.append("    const int c = (ty + hy) * tw + tx + hx;  // this thread's element in a tile")
    L.append("    // In-plane global offsets and tile positions of what this thread stages: its own element and")
    L.append("    // up to 8 halo elements (the tile's element (sx, sy) is global (x0 - hx + sx, y0 - hy + sy)). An")
    L.append("    // element is needed only if some active thread reads it: x < xend + hx and y < yend + hy.")
    roles = [("own", "true", "0", "0", "tx + hx", "ty + hy"),
             ("lf", "tx < hx", "-hx", "0", "tx", "ty + hy"),
             ("rt", "tx < hx", "bx", "0", "tx + bx + hx", "ty + hy"),
             ("tp", "ty < hy", "0", "-hy", "tx + hx", "ty"),
             ("bt", "ty < hy", "0", "by", "tx + hx", "ty + by + hy"),
             ("c0", "tx < hx && ty < hy", "-hx", "-hy", "tx", "ty"),
             ("c1", "tx < hx && ty < hy", "bx", "-hy", "tx + bx + hx", "ty"),
             ("c2", "tx < hx && ty < hy", "-hx", "by", "tx", "ty + by + hy"),
             ("c3", "tx < hx && ty < hy", "bx", "by", "tx + bx + hx", "ty + by + hy")]
    for r, cond, dx, dy, sx, sy in roles:
        gx = "i" if dx == "0" else f"i + {dx}" if dx[0] != "-" else f"i - {dx[1:]}"
        gy = "j" if dy == "0" else f"j + {dy}" if dy[0] != "-" else f"j - {dy[1:]}"
        L.append(f"    const bool v_{r} = ({cond}) && {gx} < xend + hx && {gy} < yend + hy"
                 + (" && !active;" if r == "own" else ";"))
        L.append(f"    const int g_{r} = {wrap(gy, 'ny')} * nx + {wrap(gx, 'nx')}, s_{r} = ({sy}) * tw + {sx};")
    offs = sorted({off[:2] for arr, off in st.loads if off[:2] != (0, 0)})
    for ox, oy in offs:
        L.append(f"    const int so_{_tok(ox)}_{_tok(oy)} = {oy} * tw + {ox};")
    L.append("    T* const nagare_tiles = reinterpret_cast<T*>(nagare_smem);"
             f"  // 2 buffers x {len(tiles)} tile(s)")
    L.append("    // Register queues along z (this thread's column): q_A_<dz> holds A at plane k + dz.")
    for arr, (zlo, zhi) in queues.items():
        for z in range(zlo, zhi + 1):
            L.append(f"    T {slot(arr, z)} = active ? in_{arr}[(long long){zplane(z, 'k0')}"
                     f" * nagare_plane + g_own] : (T)0;")
    L.append("    int nagare_buf = 0;")
    L.append("    for (int k = k0; k < k1; ++k) {")
    L.append("        // prefetch the next plane's queue leads (in flight during this plane's staging and update)")
    for arr, (_, zhi) in queues.items():
        L.append(f"        T n_{arr} = {slot(arr, zhi)};")
        L.append(f"        if (active && k + 1 < k1) n_{arr} = in_{arr}"
                 f"[(long long){zplane(zhi + 1)} * nagare_plane + g_own];")
    for t, (arr, dz) in enumerate(tiles):
        L.append(f"        T* const {tname(arr, dz)} = nagare_tiles + (nagare_buf * {len(tiles)} + {t}) * tsize;")
        L.append(f"        {{  // stage {arr} at plane k{'' if dz == 0 else f'{dz:+d}'}")
        L.append(f"            const T* const pl = in_{arr} + (long long){zplane(dz)} * nagare_plane;")
        L.append(f"            if (active) {tname(arr, dz)}[c] = {slot(arr, dz)};")
        for r, *_ in roles:
            L.append(f"            if (v_{r}) {tname(arr, dz)}[s_{r}] = pl[g_{r}];")
        L.append("        }")
    L.append("        __syncthreads();  // the tiles of plane k are complete (double buffer: no second barrier)")
    names = {}
    for arr, off in st.loads:
        if off[:2] == (0, 0):
            names[(arr, off)] = slot(arr, off[2])
        else:
            names[(arr, off)] = f"{tname(arr, off[2])}[c + so_{_tok(off[0])}_{_tok(off[1])}]"
    L.append("        if (active) {")
    L.append("            const long long at = (long long)k * nagare_plane + g_own;")
    for o in st.outputs:
        L.append(f"            // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
        L.append(f"            out_{o}[at] = {to_c(st.exprs[o], names)};")
    L.append("        }")
    for arr, (zlo, zhi) in queues.items():
        for z in range(zlo, zhi):
            L.append(f"        {slot(arr, z)} = {slot(arr, z + 1)};")
        L.append(f"        {slot(arr, zhi)} = n_{arr};")
    L.append("        nagare_buf ^= 1;")
    L.append("    }")
    L.append("}")
    return L


def vec_layout(st):
    """The vector kernels' plan. A *row* is (array, dy, dz): the x-run of one input at one y/z offset,
    read as this lane's aligned vector. ``queues`` = (array, dy) → (zlo, zhi) for rows read at a
    contiguous run of more than one dz (a register queue of vectors along z: one vector load per
    plane); ``direct`` = the other rows (one vector load per plane each); ``xoffs`` = row → the x
    offsets read from it (the non-zero ones come partly from the adjacent lanes' vectors)."""
    rows: dict = {}
    for arr, off in st.loads:
        rows.setdefault((arr, off[1], off[2]), set()).add(off[0])
    planes: dict = {}
    for arr, dy, dz in rows:
        planes.setdefault((arr, dy), []).append(dz)
    queues = {k: (min(v), max(v)) for k, v in sorted(planes.items())
              if len(v) > 1 and sorted(v) == list(range(min(v), max(v) + 1))}
    direct = [r for r in sorted(rows) if r[:2] not in queues]
    return queues, direct, {r: tuple(sorted(v)) for r, v in sorted(rows.items())}


def _vec_kernel(st, dtype, boundary: str, V: int) -> list[str]:
    """The vector shape (3D): a z-march in which each thread owns V x-consecutive points
    x0 … x0 + V − 1 (x0 = V · global thread x), so a warp covers 32·V points of one row.

    Every row the update reads (array, dy, dz) is loaded as ONE aligned V-vector per plane; rows of
    one (array, dy) read at consecutive dz share a register queue of vectors along z, so each input
    row is loaded from DRAM once per thread and plane. The x-neighbours x0 − m … x0 − 1 and
    x0 + V … x0 + V + p − 1 (m, p ≤ hx ≤ V) are elements of the adjacent lanes' vectors:
    ``__shfl_up_sync`` / ``__shfl_down_sync`` of the needed elements; lane 0 and lane 31, and the last
    lane of the row, load those elements themselves (at a wrapped x, which is always valid memory).
    Idle lanes past the row end (nx not a multiple of 32·V) load a valid vector (the row's last) and
    take part in every shuffle, but store nothing; warps entirely past the row end and rows outside
    the update range leave at once (uniform per warp, since a warp is one row segment). Outputs are
    stored as one vector when all V points are updated; with fixed boundaries the vectors at the row
    ends store only their points in [hx, nx − hx), element by element. Periodic y/z neighbours wrap
    as in the other kernels; fixed boundaries update y ∈ [hy, ny − hy), z ∈ [hz, nz − hz).

    Launch (the loop checks): blockDim.x a multiple of 32, nx % V == 0, every array aligned to
    V × itemsize bytes (rows then start on vector boundaries); grid (⌈nx / (V·bx)⌉, ⌈ny' / by⌉,
    ⌈nz' / zmarch⌉) over the updated y/z ranges ny', nz'."""
    periodic = boundary == "periodic"
    name = kernel_name(st, dtype, boundary, vec_variant(V))
    hx, hy, hz = st.halo
    ly, lz = (0, 0) if periodic else (hy, hz)
    VT = f"nagare_v{V}"
    nbytes = V * np.dtype(dtype).itemsize
    queues, direct, xoffs = vec_layout(st)
    args = [f"const T* __restrict__ in_{n}" for n in st.inputs]
    args += [f"T* __restrict__ out_{n}" for n in st.outputs]
    args += [f"const T p_{n}" for n in st.params]
    args += ["const int nx", "const int ny", "const int nz", "const int zmarch"]
    full_mask = "0xffffffffu"

    def wrap(expr, n):
        return f"nagare_wrap({expr}, {n})" if periodic else f"({expr})"

    def shifted(v, o):
        return v if o == 0 else f"{v} {'+' if o > 0 else '-'} {abs(o)}"

    def rname(row):
        arr, dy, dz = row
        return f"{arr}__{_tok(dy)}_{_tok(dz)}"

    def slot(arr, dy, s):
        return f"{arr}__q_{_tok(dy)}_s{s}"

    def rowvar(row):
        """The vector holding ``row`` at the current plane k."""
        arr, dy, dz = row
        if (arr, dy) in queues:
            return slot(arr, dy, dz - queues[(arr, dy)][0])
        return rname(row)

    def zoff(dz):
        return f"z_{_tok(dz)}"

    def yoff(dy):
        return f"r_{_tok(dy)}"

    def vload(arr, dy, zexpr):
        return f"*reinterpret_cast<const {VT}*>(in_{arr} + {zexpr} + {yoff(dy)} + xc)"

    left = {r: V + min(d) for r, d in xoffs.items() if min(d) < 0}    # first element needed of the left vector
    right = {r: max(d) for r, d in xoffs.items() if max(d) > 0}       # elements needed of the right vector
    dys = sorted({dy for _, dy, _ in xoffs} | {0})
    # planes a step addresses: the queue leads, the direct rows, the edge lanes' rows and the store
    dzs = sorted({zhi for _, zhi in queues.values()} | {dz for _, _, dz in direct}
                 | {dz for _, _, dz in set(left) | set(right)} | {0})

    L = [f'extern "C" __global__ void {name}(', "    " + ",\n    ".join(args) + ")", "{"]
    L.append(f"    // Launch (checked by the loop): blockDim.x a multiple of 32, nx % {V} == 0, arrays {nbytes}-byte "
             "aligned.")
    L.append("    const int lane = (int)(threadIdx.x & 31u);")
    L.append(f"    const int w0 = {V} * (int)(blockIdx.x * blockDim.x + (threadIdx.x & ~31u));  // the warp's first x")
    L.append(f"    const int j = {f'{ly} + ' if ly else ''}(int)(blockIdx.y * blockDim.y + threadIdx.y);")
    L.append(f"    if (w0 >= nx || j >= ny{f' - {ly}' if ly else ''}) return;  // uniform per warp (a warp is one "
             "row segment): the shuffles stay full")
    L.append(f"    const int x0 = w0 + {V} * lane;  // this lane's points x0 … x0 + {V - 1}")
    L.append("    const bool active = x0 < nx;  // lanes past the row end load a valid vector and shuffle, store "
             "nothing")
    L.append(f"    const int xc = active ? x0 : nx - {V};")
    if left:
        L.append(f"    const int xl = xc == 0 ? nx - {V} : xc - {V};  // the vector left of xc (wrapped: valid memory)")
        L.append("    const bool edge_l = lane == 0;  // loads its left neighbours itself")
    if right:
        L.append(f"    const int xr = xc + {V} == nx ? 0 : xc + {V};  // the vector right of xc (wrapped)")
        L.append(f"    const bool edge_r = lane == 31 || xc + {V} == nx;  // loads its right neighbours itself")
    if periodic or hx == 0:
        L.append("    const bool full = active;  // every point of the vector is updated")
    else:
        L.append(f"    const bool full = active && x0 >= {hx} && x0 + {V} <= nx - {hx};  // all {V} points updated")
        for v in range(V):
            L.append(f"    const bool upd_{v} = active && x0 + {v} >= {hx} && x0 + {v} < nx - {hx};")
    L.append(f"    const int k0 = {f'{lz} + ' if lz else ''}(int)blockIdx.z * zmarch;")
    L.append(f"    const int k1 = min(k0 + zmarch, nz{f' - {lz}' if lz else ''});")
    L.append("    const long long nagare_plane = (long long)nx * ny;")
    L.append("    // row starts (y offsets) within a plane"
             + (", wrapped once here" if periodic and len(dys) > 1 else ""))
    for dy in dys:
        L.append(f"    const int {yoff(dy)} = {wrap(shifted('j', dy), 'ny') if dy else 'j'} * nx;")
    L.append("    // Register queues along z: slot s of (array, dy) holds that row's vector at plane k + zlo + s.")
    for (arr, dy), (zlo, zhi) in queues.items():
        for s_ in range(zhi - zlo):
            at = _wrap_at("k0", zlo + s_, "nz", periodic)
            L.append(f"    {VT} {slot(arr, dy, s_)} = {vload(arr, dy, f'(long long){at} * nagare_plane')};")
        L.append(f"    {VT} {slot(arr, dy, zhi - zlo)};")
    L.append("    for (int k = k0; k < k1; ++k) {")
    for dz in dzs:
        at = "k" if dz == 0 else wrap(shifted("k", dz), "nz")
        L.append(f"        const long long {zoff(dz)} = (long long){at} * nagare_plane;")
    L.append("        // one aligned vector load per row: the queue leads, then the other rows")
    for (arr, dy), (zlo, zhi) in queues.items():
        L.append(f"        {slot(arr, dy, zhi - zlo)} = {vload(arr, dy, zoff(zhi))};")
    for row in direct:
        arr, dy, dz = row
        L.append(f"        const {VT} {rname(row)} = {vload(arr, dy, zoff(dz))};")
    if left or right:
        L.append("        // x-neighbours: elements of the adjacent lanes' vectors (edge lanes load their own)")
    for row in xoffs:
        arr, dy, dz = row
        v = rowvar(row)
        at = f"in_{arr}[{zoff(dz)} + {yoff(dy)} + "
        for c in range(left.get(row, V), V):
            L.append(f"        T {rname(row)}_l{c} = __shfl_up_sync({full_mask}, {v}.e[{c}], 1);")
            L.append(f"        if (edge_l) {rname(row)}_l{c} = {at}xl + {c}];")
        for c in range(right.get(row, 0)):
            L.append(f"        T {rname(row)}_r{c} = __shfl_down_sync({full_mask}, {v}.e[{c}], 1);")
            L.append(f"        if (edge_r) {rname(row)}_r{c} = {at}xr + {c}];")
    for o in st.outputs:
        L.append(f"        // output {o} = {to_python(st.exprs[o])}   [{st.location}]")
        for e in range(V):
            names = {}
            for arr, off in st.loads:
                row, i = (arr, off[1], off[2]), e + off[0]
                names[(arr, off)] = (f"{rowvar(row)}.e[{i}]" if 0 <= i < V else
                                     f"{rname(row)}_l{V + i}" if i < 0 else f"{rname(row)}_r{i - V}")
            L.append(f"        const T {o}__v{e} = {to_c(st.exprs[o], names)};")
    L.append("        if (full) {")
    for o in st.outputs:
        vals = ", ".join(f"{o}__v{e}" for e in range(V))
        L.append(f"            *reinterpret_cast<{VT}*>(out_{o} + {zoff(0)} + {yoff(0)} + xc) = {VT}{{{{{vals}}}}};")
    if not (periodic or hx == 0):
        L.append(f"        }} else {{  // a vector at a row end: only its points in [{hx}, nx - {hx})")
        for o in st.outputs:
            for e in range(V):
                L.append(f"            if (upd_{e}) out_{o}[{zoff(0)} + {yoff(0)} + xc + {e}] = {o}__v{e};")
    L.append("        }")
    for (arr, dy), (zlo, zhi) in queues.items():
        for s_ in range(zhi - zlo):
            L.append(f"        {slot(arr, dy, s_)} = {slot(arr, dy, s_ + 1)};")
    L.append("    }")
    L.append("}")
    return L


def _wrap_at(start: str, o: int, n: str, periodic: bool) -> str:
    if o == 0:
        return start
    expr = f"{start} {'+' if o > 0 else '-'} {abs(o)}"
    return f"nagare_wrap({expr}, {n})" if periodic else f"({expr})"


def _shift(queues, slot, by: int, indent: str) -> list[str]:
    out = []
    for (arr, plane), zs in queues.items():
        span = zs[-1] - zs[0]
        for s in range(span):
            out.append(f"{indent}{slot(arr, plane, s)} = {slot(arr, plane, s + by)};")
    return out


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

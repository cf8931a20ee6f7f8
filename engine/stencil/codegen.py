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
"""
from __future__ import annotations

import numpy as np

from .expr import Bin, Call, Const, Load, Neg, Node, Param, to_python

CTYPES = {np.dtype("float32"): "float", np.dtype("float64"): "double"}
UNROLLS = (1, 2, 4, 8)
PLAIN = "plain"  # the kernel variant without z-marching: one thread per point, 3D thread blocks
TILE = "tile"  # 2.5D blocking: a block marches over z, staging each plane's xy tile (+ halo) in shared memory
REGISTER_BUDGET = 64  # values held per thread by one unrolled step (loads in flight) before U is capped


def ctype(dtype) -> str:
    dt = np.dtype(dtype)
    if dt not in CTYPES:
        raise ValueError(f"stencils run in float32 or float64, not {dt}")
    return CTYPES[dt]


def kernel_name(st, dtype, boundary, unroll: int | str = 1) -> str:
    """``…_u1`` … ``…_u8`` for the z-marching kernels, ``…_plain`` for the plain 3D-block kernel."""
    if unroll in (PLAIN, TILE):
        return f"nagare_{st.name}_{boundary}_{ctype(dtype)}_{unroll}"
    return f"nagare_{st.name}_{boundary}_{ctype(dtype)}_u{int(unroll)}"


def kernel_variants(st) -> tuple:
    """Every kernel generated for ``st``: the unrolled z-marching kernels, the plain one and (3D
    only) the 2.5D-blocked tile kernel."""
    return unroll_variants(st) + (PLAIN,) + ((TILE,) if st.ndim == 3 else ())


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


def generate(st, dtype, boundary: str, unrolls=None, plain: bool = True, tile: bool = True) -> str:
    """The complete CUDA source of one stencil for one dtype and boundary kind: one kernel per
    unroll in ``unrolls`` (default :func:`unroll_variants`) and, with ``plain``, the plain kernel
    (:func:`_plain_kernel`), all with the same arguments."""
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
    if tile:
        L.append("extern __shared__ __align__(16) unsigned char nagare_smem[];  // the tile kernel's planes")
    if boundary == "periodic":
        L.append("__device__ __forceinline__ int nagare_wrap(int v, int n) "
                 "{ return v < 0 ? v + n : (v >= n ? v - n : v); }")
    if plain:
        L.append("// Plus the plain shape (`_plain`): no march, one thread per point, 3D thread blocks "
                 "(bx, by, bz = the launch's third number).")
    for u in unrolls:
        L.append("")
        L.extend(_kernel(st, dtype, boundary, u))
    if plain:
        L.append("")
        L.extend(_plain_kernel(st, dtype, boundary))
    if tile:
        L.append("")
        L.extend(_tile_kernel(st, dtype, boundary))
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

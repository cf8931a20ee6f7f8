"""Run a generated stencil kernel on the CPU: compile the *exact* CUDA source as C++ with the
CUDA built-ins (blockIdx, threadIdx, blockDim) emulated, and loop over every block and thread of
a launch. This checks the generated indexing, z-marching, wrapping and range logic for any
launch configuration on a machine without a GPU (the arithmetic is the same IEEE arithmetic,
compiled with -ffp-contract=off like the device's --fmad=false).
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
from nagare.engine.stencil.codegen import ctype, generate, kernel_name, kernel_variants

PRELUDE = """
#include <algorithm>
#include <cmath>
using std::min; using std::sqrt; using std::exp; using std::sin; using std::cos; using std::fabs;
using std::fmin; using std::fmax;
struct nagare_dim3 { unsigned x, y, z; };
static nagare_dim3 blockIdx, threadIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__
#define __align__(n)
inline void __syncthreads() {}  // the sequential launch never runs the tile kernel (see build)
// round-to-nearest products the compiler may not contract (compiled here with -ffp-contract=off)
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
#include <cstdlib>
// nor the vector kernels (warp shuffles): they only have to compile here
template <typename T> T __shfl_up_sync(unsigned, T, int, int = 32) { std::abort(); }
template <typename T> T __shfl_down_sync(unsigned, T, int, int = 32) { std::abort(); }
alignas(16) unsigned char nagare_smem[1];
"""

# The tile kernel synchronises its block and the vector kernels shuffle within warps: run them with
# one fiber per CUDA thread, a barrier over the block's fibers for __syncthreads and a per-warp
# exchange slot + barrier for __shfl_{up,down}_sync (tests/cuda_emu/emu.h), blocks one after another
# sharing one NaN-poisoned shared-memory array (reads of unstaged tile elements show up as NaN).
EMU_DIR = Path(__file__).resolve().parents[1] / "cuda_emu"
TILE_PRELUDE = """
#include "emu.h"
#include <cmath>
using std::sqrt; using std::exp; using std::sin; using std::cos; using std::fabs; using std::fmin; using std::fmax;
alignas(16) unsigned char nagare_smem[1 << 20];
"""


def compile_shared(src: str, prefix: str, tmp_path_factory) -> ctypes.CDLL:
    """Compile emulated CUDA source (PRELUDE + kernels + extern "C" wrappers) as a host shared
    library, cached by content in the session's temporary folder, and load it."""
    d = tmp_path_factory.getbasetemp()
    tag = hashlib.sha256(src.encode()).hexdigest()[:12]
    cpp, lib = d / f"{prefix}_{tag}.cpp", d / f"{prefix}_{tag}.so"
    if not lib.exists():
        cpp.write_text(src)
        res = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-w", "-shared",
                              "-fPIC", str(cpp), "-o", str(lib)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-4000:]
    return ctypes.CDLL(str(lib))


def compile_threaded(wrapper: str, source: Path, prefix: str, tmp_path_factory) -> ctypes.CDLL:
    """Compile a hand-written CUDA file (``source``, included by ``wrapper`` next to tests/cuda_emu/emu.h)
    with one fiber per CUDA thread (barriers, warp shuffles), cached by the wrapper's and the
    source's content, and load it — the compact family's kernel tests."""
    tag = hashlib.sha256((wrapper + source.read_text()).encode()).hexdigest()[:12]
    work = tmp_path_factory.mktemp(prefix)
    cpp, so = work / f"{tag}.cpp", work / f"{tag}.so"
    cpp.write_text(wrapper)
    res = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-fno-fast-math", "-shared",
                          "-fPIC", f"-I{EMU_DIR}", f"-I{source.parent}", str(cpp), "-o", str(so)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return ctypes.CDLL(str(so))


def available() -> bool:
    return shutil.which("g++") is not None


def _wrapper(st, dtype, boundary, unroll, entry: str = "emulate") -> str:
    T = ctype(dtype)
    name = kernel_name(st, dtype, boundary, unroll)
    params = [f"const {T}* in_{n}" for n in st.inputs] + [f"{T}* out_{n}" for n in st.outputs]
    params += [f"{T} p_{n}" for n in st.params]
    dims = ["nx", "ny", "nz"][: st.ndim]
    params += [f"int {d}" for d in dims] + ["int zmarch"]
    call = [f"in_{n}" for n in st.inputs] + [f"out_{n}" for n in st.outputs] + [f"p_{n}" for n in st.params]
    call += dims + ["zmarch"]
    return f"""
extern "C" void {entry}(int gx, int gy, int gz, int bx, int by, int bz, {', '.join(params)}) {{
    blockDim = {{(unsigned)bx, (unsigned)by, (unsigned)bz}};
    for (unsigned z = 0; z < (unsigned)gz; ++z)
    for (unsigned y = 0; y < (unsigned)gy; ++y)
    for (unsigned x = 0; x < (unsigned)gx; ++x) {{
        blockIdx = {{x, y, z}};
        for (unsigned tz = 0; tz < (unsigned)bz; ++tz)
        for (unsigned ty = 0; ty < (unsigned)by; ++ty)
        for (unsigned tx = 0; tx < (unsigned)bx; ++tx) {{
            threadIdx = {{tx, ty, tz}};
            {name}({', '.join(call)});
        }}
    }}
}}
"""


def threaded(variant) -> bool:
    """Kernels that need the threaded launch: the tile kernel (barriers) and the vector kernels (shuffles)."""
    return isinstance(variant, str) and (variant == "tile" or variant.startswith("vec"))


def _threaded_kernel_wrapper(st, dtype, boundary, variant, entry: str = "emulate") -> str:
    T = ctype(dtype)
    name = kernel_name(st, dtype, boundary, variant)
    params = [f"const {T}* in_{n}" for n in st.inputs] + [f"{T}* out_{n}" for n in st.outputs]
    params += [f"{T} p_{n}" for n in st.params] + ["int nx", "int ny", "int nz", "int zmarch"]
    call = [f"in_{n}" for n in st.inputs] + [f"out_{n}" for n in st.outputs] + [f"p_{n}" for n in st.params]
    call += ["nx", "ny", "nz", "zmarch"]
    return threaded_wrapper(name, params, call, entry)


TILE_FLAGS = ("-std=c++20", "-pthread", "-fno-strict-aliasing", f"-I{EMU_DIR}")  # vectors: T[] viewed as structs


def threaded_wrapper(name: str, params: list, call: list, entry: str = "emulate") -> str:
    """``emulate(grid, block, args)`` running each block's threads as fibers that meet at barriers
    (for kernels with barriers or warp shuffles; compile with ``TILE_PRELUDE`` and ``TILE_FLAGS``).
    Warps are runs of 32 consecutive linear thread ids, as on the device."""
    return f"""
extern "C" void {entry}(int gx, int gy, int gz, int bx, int by, int bz, {', '.join(params)}) {{
    emu_launch3(gx, gy, gz, bx, by, bz, nagare_smem, sizeof(nagare_smem), [&] {{ {name}({', '.join(call)}); }});
}}
"""


def build(st, dtype, boundary, workdir: Path, unroll: int | str = 1):
    """The emulated kernel of ``st`` with the given unroll (see codegen.unroll_variants), the
    plain kernel (``unroll="plain"``), the tile kernel (``unroll="tile"``) or a vector kernel
    (``unroll="vec2"``/``"vec4"``); the last two with the threaded launch. One library holds every
    kernel of ``st`` that shares the launch (sequential or threaded), compiled once per content in
    ``workdir`` (a compile takes seconds; the source generates every kernel anyway)."""
    variants = [v for v in kernel_variants(st) if threaded(v) == threaded(unroll)]
    assert unroll in variants, (unroll, variants)
    body = generate(st, dtype, boundary)
    if threaded(unroll):
        wrappers = [_threaded_kernel_wrapper(st, dtype, boundary, v, f"emulate_{v}") for v in variants]
        src, extra = TILE_PRELUDE + body + "".join(wrappers), list(TILE_FLAGS)
    else:
        src = PRELUDE + body + "".join(_wrapper(st, dtype, boundary, v, f"emulate_{v}") for v in variants)
        extra = []
    tag = hashlib.sha256(src.encode()).hexdigest()[:12]
    cpp, lib = workdir / f"{tag}.cpp", workdir / f"{tag}.so"
    if not lib.exists():
        cpp.write_text(src)
        res = subprocess.run(["g++", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", *extra,
                              str(cpp), "-o", str(lib)], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(res.stderr)
    fn = getattr(ctypes.CDLL(str(lib)), f"emulate_{unroll}")
    fn.restype = None
    return fn


def launch(fn, st, dtype, grid, block, arrays: dict, params: dict, zmarch: int) -> None:
    """Call the emulated kernel like ``kernel(grid, block, args)`` on host NumPy arrays (``block``:
    (bx, by) or (bx, by, bz))."""
    scalar = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
    bz = block[2] if len(block) > 2 else 1
    args = [ctypes.c_int(int(g)) for g in grid] + [ctypes.c_int(block[0]), ctypes.c_int(block[1]), ctypes.c_int(bz)]
    args += [arrays[n].ctypes.data_as(ctypes.c_void_p) for n in st.inputs + st.outputs]
    args += [scalar(params[n]) for n in st.params]
    shape = arrays[st.inputs[0]].shape
    args += [ctypes.c_int(n) for n in shape[::-1]] + [ctypes.c_int(zmarch)]
    fn(*args)

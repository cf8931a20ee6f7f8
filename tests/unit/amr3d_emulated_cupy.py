"""A CuPy stand-in that runs amr3d's CUDA modules (ladder.cu, coupling.cu) on the CPU: arrays are
NumPy arrays, ``RawModule`` compiles the module's exact source (the KernelSpec's code) as C++ with
the CUDA built-ins emulated (cuda_emulator.PRELUDE, -ffp-contract=off) and one wrapper per name
expression, and a launch loops over every block and thread. Streams and events are no-ops (the
launches run in order). So LadderStepper and tree_stepper.CupyKernels — their Python glue
(argument order and types, grids, buffers) and the kernels — run unchanged without a GPU.

Each launch checks its arguments against the kernel's parameter list as CuPy could not: an
array's element type, a scalar's NumPy type (np.float32 for float, np.int32 for int, np.int64 for
long long), and the argument count.
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import subprocess
import types
from pathlib import Path

import numpy as np

from tests.unit.cuda_emulator import PRELUDE
from tests.unit.fake_cupy import _Event, _Stream, get_elapsed_time

_KERNEL = re.compile(r'(?:template\s*<([^<>]*)>\s*)?(?:extern\s+"C"\s+)?__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
_SCALARS = {"float": np.float32, "int": np.int32, "long long": np.int64, "double": np.float64,
            "unsigned long long": np.uint64, "unsigned int": np.uint32, "unsigned char": np.uint8, "bool": np.bool_,
            "unsigned short": np.float16}  # fp16 storage: float16 arrays, whose bits the kernels take as unsigned short
_CTYPES = {"float": ctypes.c_float, "int": ctypes.c_int, "long long": ctypes.c_longlong, "double": ctypes.c_double}


def _split_args(text: str) -> list[str]:
    return [a.strip() for a in text.split(",")] if text.strip() else []


class _Kernel:
    def __init__(self, fn, name: str, params: list[tuple[str, str]]):
        self.fn, self.name, self.params = fn, name, params
        self.launches = 0

    def __call__(self, grid, block, args, stream=None, **kw):
        grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
        assert all(g == 1 for g in grid[1:]) and all(b == 1 for b in block[1:]), (self.name, grid, block)
        assert len(args) == len(self.params), f"{self.name}: {len(args)} arguments for {len(self.params)} parameters"
        vals = []
        for (ty, pname), a in zip(self.params, args):
            base = re.sub(r"\bconst\b|\*", " ", ty).split()
            base = " ".join(base)
            if "*" in ty:
                assert isinstance(a, np.ndarray), f"{self.name}: {pname} wants an array, got {type(a).__name__}"
                assert a.flags.c_contiguous, f"{self.name}: {pname} is not contiguous"
                assert a.dtype == _SCALARS[base], f"{self.name}: {pname} is {ty}, the array {a.dtype}"
                vals.append(ctypes.c_void_p(a.ctypes.data))
            else:
                assert type(a) is _SCALARS[base], f"{self.name}: {pname} is {ty}, the argument {type(a).__name__}"
                vals.append(_CTYPES[base](a))
        ptrs = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(v) for v in vals])
        self.fn(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), ptrs)
        self.launches += 1


class EmuModule:
    """``cupy.RawModule(code=..., options=..., name_expressions=...)`` compiled with g++."""

    def __init__(self, code: str, workdir: Path, name_expressions=None, options=()):
        self.code, self.workdir, self.names = code, Path(workdir), list(name_expressions or [])
        self.options = tuple(options)  # (not applied: g++ always runs with -ffp-contract=off; tests read them)
        self.lib = None
        self.params: dict[str, list[tuple[str, str]]] = {}

    def _signature(self, expr: str):
        base, _, targs = expr.partition("<")
        targs = _split_args(targs.rstrip(">"))
        csm = re.search(r"^#define NAGARE_CSM 1$", self.code, re.M) is not None
        for m in _KERNEL.finditer(self.code):
            if m.group(2) != base:
                continue
            text = m.group(3).replace("NAGARE_CSM_PARAM", ", const float* csm_c" if csm else "")
            text = text.replace("__restrict__", "")
            # template parameters as (name, default): "int M" → ("M", None), "typename S = float" → ("S", "float")
            tparams = [(p.split("=")[0].split()[-1], p.split("=", 1)[1].strip() if "=" in p else None)
                       for p in _split_args(m.group(1) or "")]
            targs_all = targs + [d for _, d in tparams[len(targs):]]
            params = []
            for p in _split_args(text):
                ty, name = p.rsplit(None, 1)
                ty += "*" * name.count("*")
                name = name.lstrip("*")
                for (tp, _), ta in zip(tparams, targs_all):
                    ty = re.sub(rf"\b{tp}\b", ta, ty)
                params.append((" ".join(ty.split()), name))
            return params
        raise KeyError(f"no __global__ {base} in the module")

    def compile(self):
        if self.lib is not None:
            return
        src = PRELUDE + self.code
        for k, expr in enumerate(self.names):
            params = self.params[expr] = self._signature(expr)
            call = ", ".join(f"*({ty}*)a[{i}]" for i, (ty, _) in enumerate(params))
            src += f"""
extern "C" void emu_k{k}(unsigned gx, unsigned bx, void** a) {{
    blockDim = {{bx, 1u, 1u}};
    for (unsigned b = 0; b < gx; ++b) {{
        blockIdx = {{b, 0u, 0u}};
        for (unsigned t = 0; t < bx; ++t) {{ threadIdx = {{t, 0u, 0u}}; {expr}({call}); }}
    }}
}}"""
        tag = hashlib.sha256(src.encode()).hexdigest()[:16]
        cpp, lib = self.workdir / f"amr3d_emu_{tag}.cpp", self.workdir / f"amr3d_emu_{tag}.so"
        if not lib.exists():
            cpp.write_text(src)
            res = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-w", "-shared",
                                  "-fPIC", str(cpp), "-o", str(lib)], capture_output=True, text=True, timeout=900)
            assert res.returncode == 0, res.stderr[-4000:]
        self.lib = ctypes.CDLL(str(lib))

    def get_function(self, name: str):
        self.compile()
        k = self.names.index(name)
        fn = getattr(self.lib, f"emu_k{k}")
        fn.restype = None
        return _Kernel(fn, name, self.params[name])


def make(workdir: Path):
    """A module usable as ``cupy`` for amr3d's LadderStepper and TreeStepper(CupyKernels)."""
    cp = types.ModuleType("cupy")
    for k in dir(np):
        if not k.startswith("__"):
            setattr(cp, k, getattr(np, k))
    cp.asnumpy = np.asarray
    cp.RawModule = lambda code, options=(), name_expressions=None: EmuModule(code, workdir, name_expressions, options)
    cp.cuda = types.SimpleNamespace(Stream=_Stream, Event=_Event, get_current_stream=lambda: _Stream(),
                                    get_elapsed_time=get_elapsed_time,
                                    Device=lambda *a: types.SimpleNamespace(
                                        id=0, synchronize=lambda: None,
                                        attributes={"MultiProcessorCount": 1, "ClockRate": 1000}),
                                    runtime=types.SimpleNamespace(
                                        getDevice=lambda: 0, memGetInfo=lambda: (1 << 34, 1 << 35),
                                        getDeviceProperties=lambda i: {
                                            "name": b"CPU emulation", "multiProcessorCount": 1,
                                            "totalGlobalMem": 1 << 35, "major": 9, "minor": 0},
                                        runtimeGetVersion=lambda: 12090, driverGetVersion=lambda: 12090))
    cp.__version__ = "emulated"
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None, used_bytes=lambda: 0)
    return cp

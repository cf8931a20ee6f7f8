"""A stand-in for CuPy on a machine without a GPU: arrays are NumPy arrays, RawModule kernels run
the generated CUDA source through the CPU emulation (cuda_emulator.py), events complete at once.

It exercises the Python glue of the device loop engines (argument order, grid, tuner, event
timing, engine integration) exactly as CuPy would be driven; the device itself is the emulator.
"""
from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np

from tests.unit import cuda_emulator


class CompileException(Exception):
    pass


class _Event:
    def __init__(self, *a, **k):
        self.t = None

    def record(self, stream=None):
        self.t = _clock[0]

    @property
    def done(self):
        return True

    def synchronize(self):
        pass


_clock = [0.0]


def get_elapsed_time(start, end):
    return float(end.t - start.t)


class _Stream:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def wait_event(self, ev):  # launches run when made: nothing to wait for
        pass

    def is_capturing(self):  # no graphs here
        return False

    def synchronize(self):
        pass


class _Kernel:
    """Calls the emulated kernel; each launch advances the fake clock by a cost of the block shape."""

    def __init__(self, code: str, name: str, workdir: Path, cost):
        import inspect

        self.code, self.name, self.workdir, self.cost = code, name, workdir, cost
        self._named = len(inspect.signature(cost).parameters) >= 3  # cost(block, zmarch, kernel name)
        self.max_threads_per_block = 1024
        self.launches = []
        # A template instantiation ("k<unsigned int>"): the template parameter replaced in the
        # signature, the call spelled with the argument.
        base, targ = (name.split("<", 1)[0], name.split("<", 1)[1][:-1].strip()) if "<" in name else (name, None)
        sig = re.search(rf"void {re.escape(base)}\((.*?)\)\s*\{{", code, re.S).group(1)
        self.params = [p.strip() for p in sig.split(",")]
        self.call = name
        if targ is not None:  # each type parameter of the template spelled with its argument
            tparams = re.search(rf"template\s*<([^>]*)>\s*__global__\s+void\s+{re.escape(base)}\b", code).group(1)
            for decl, arg in zip(tparams.split(","), targ.split(","), strict=True):
                kind, pname = decl.split()
                if kind == "typename":
                    self.params = [re.sub(rf"\b{pname}\b", arg.strip(), p) for p in self.params]
        self._fn = None

    def _build(self):
        import ctypes
        import hashlib
        import subprocess

        names = [p.split()[-1] for p in self.params]
        wrapper = f"""
extern "C" void emulate(int gx, int gy, int gz, int bx, int by, int bz, {', '.join(self.params)}) {{
    blockDim = {{(unsigned)bx, (unsigned)by, (unsigned)bz}};
    for (unsigned z = 0; z < (unsigned)gz; ++z) for (unsigned y = 0; y < (unsigned)gy; ++y)
    for (unsigned x = 0; x < (unsigned)gx; ++x) {{
        blockIdx = {{x, y, z}};
        for (unsigned tz = 0; tz < (unsigned)bz; ++tz)
        for (unsigned ty = 0; ty < (unsigned)by; ++ty) for (unsigned tx = 0; tx < (unsigned)bx; ++tx) {{
            threadIdx = {{tx, ty, tz}};
            {self.call}({', '.join(names)});
        }}
    }}
}}
"""
        flags = []
        # barriers/shuffles: one fiber per CUDA thread (tests/cuda_emu/emu.h)
        if cuda_emulator.threaded(self.name.split("<", 1)[0].rsplit("_", 1)[1]):
            wrapper = cuda_emulator.threaded_wrapper(self.name, self.params, names)
            src, flags = cuda_emulator.TILE_PRELUDE + self.code + wrapper, list(cuda_emulator.TILE_FLAGS)
        else:
            src = cuda_emulator.PRELUDE + self.code + wrapper
        tag = hashlib.sha256(src.encode()).hexdigest()[:12]
        cpp, lib = self.workdir / f"fk{tag}.cpp", self.workdir / f"fk{tag}.so"
        if not lib.exists():
            cpp.write_text(src)
            res = subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", *flags, str(cpp), "-o",
                                  str(lib)],
                                 capture_output=True, text=True)
            if res.returncode:
                raise CompileException(res.stderr)
        self._fn = ctypes.CDLL(str(lib)).emulate
        self._fn.restype = None

    def __call__(self, grid, block, args, **kw):
        import ctypes

        if self._fn is None:
            self._build()
        assert len(args) == len(self.params), (len(args), self.params)
        # a 1- or 2-tuple grid or block has 1 in the missing dimensions, as in CuPy
        g3, b3 = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
        cargs = [ctypes.c_int(int(g)) for g in g3] + [ctypes.c_int(int(b)) for b in b3]
        for p, a in zip(self.params, args):
            if isinstance(a, np.ndarray):
                assert "*" in p, f"array passed for scalar parameter {p}"
                cargs.append(a.ctypes.data_as(ctypes.c_void_p))
            elif isinstance(a, np.float32):
                cargs.append(ctypes.c_float(a))
            elif isinstance(a, np.float64):
                cargs.append(ctypes.c_double(a))
            elif isinstance(a, np.int32):
                cargs.append(ctypes.c_int(int(a)))
            elif isinstance(a, np.int64):
                cargs.append(ctypes.c_longlong(int(a)))
            else:
                raise TypeError(f"kernel argument {type(a).__name__} for {p}: CuPy needs numpy scalars")
        self._fn(*cargs)
        self.launches.append((tuple(grid), tuple(block)))
        _clock[0] += self.cost(block, args[-1], self.name) if self._named else self.cost(block, args[-1])


ALIGN = 256  # CuPy's memory pool hands out 512-byte-rounded blocks: device arrays start well aligned


def _aligned(fn):
    """``fn`` (a NumPy allocator) returning arrays that start on an ``ALIGN``-byte boundary, as CuPy's do
    (the vector kernels' launch checks the alignment; NumPy only guarantees 16 bytes)."""
    def wrapped(*a, **k):
        out = fn(*a, **k)
        if not isinstance(out, np.ndarray) or out.ndim == 0 or out.ctypes.data % ALIGN == 0:
            return out
        buf = np.empty(out.nbytes + ALIGN, np.uint8)
        off = (-buf.ctypes.data) % ALIGN
        moved = buf[off:off + out.nbytes].view(out.dtype).reshape(out.shape)
        moved[...] = out
        return moved

    return wrapped


def make(workdir: Path, cost=lambda block, zmarch: 1.0 + abs(block[0] - 32) / 32 + abs(int(zmarch) - 4) / 4,
         fmad_off: bool = True):
    """A module object usable as ``cupy`` (and a Backend's xp). ``cost(block, zmarch[, kernel name])``
    is the fake device time of a launch. ``fmad_off``: every module must be compiled with
    --fmad=false (the generated stencil code, whose bits the tests compare with NumPy's); off for
    modules whose emulation is compared only with itself."""
    kernels: list[_Kernel] = []

    class RawModule:
        def __init__(self, code, options=(), name_expressions=None):
            self.code, self.options = code, tuple(options)

        def compile(self):  # engine/cuda.py compiles eagerly; the emulation builds at the first launch
            return None

        def get_function(self, name):
            if name == "nagare_spin":  # the benchmark's busy-wait: nothing to emulate
                return lambda grid, block, args: None
            assert "--fmad=false" in self.options or not fmad_off
            k = _Kernel(self.code, name, workdir, cost)
            kernels.append(k)
            return k

    cp = types.ModuleType("cupy")
    for attr in ("zeros", "zeros_like", "empty_like", "full", "asarray", "sum", "max", "min", "mean", "pad", "roll",
                 "float32", "float64", "sqrt", "exp", "sin", "cos", "abs", "minimum", "maximum", "ndarray"):
        setattr(cp, attr, getattr(np, attr))
    for attr in ("zeros", "zeros_like", "empty_like", "full", "asarray"):  # allocations aligned as CuPy's pool's
        setattr(cp, attr, _aligned(getattr(np, attr)))
    cp.asnumpy = np.asarray
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    cp.random = np.random
    cp.RawModule = RawModule
    cp.kernels = kernels
    cuda = types.SimpleNamespace(
        Event=_Event, Stream=_Stream, get_elapsed_time=get_elapsed_time,
        compiler=types.SimpleNamespace(CompileException=CompileException),
        runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"Fake GPU", "clockRate": 1000,
                                                                     "multiProcessorCount": 4,
                                                                     "totalGlobalMem": 2**30, "major": 9, "minor": 0},
                                      getDevice=lambda: 0, runtimeGetVersion=lambda: 13000,
                                      driverGetVersion=lambda: 13000),
        Device=lambda *a: types.SimpleNamespace(id=0),
        get_current_stream=lambda: _Stream())
    cp.cuda = cuda
    cp.__version__ = "0.0-fake"
    return cp

"""Compiling device code from shaders/cuda with CuPy's RawModule (NVRTC), cached.

A :class:`KernelSpec` describes one NVRTC compilation: the shader file(s), the name expressions
(template instances) it must emit, extra options and ``-D`` defines. It is frozen and hashable, so
it is its own cache key: ``spec.compile()`` builds the module once per process (CuPy also keeps its
own on-disk cache of the binaries, keyed by the source, the options and the name expressions) and
``spec.function(name)`` looks a kernel up, cheaply enough for hot paths. :func:`template` spells a
template instance from typed arguments, :func:`precompile` compiles many specs in a process pool
(filling the disk cache, so the parent then loads each module without compiling), and
tools/kernel_sass.py compiles the same description with nvcc for registers and SASS.
"""
from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
from collections.abc import Iterable, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import cache

import numpy as np
from nagare.engine import progress

from nagare import shaders

log = logging.getLogger("nagare")

DEFAULT_OPTIONS = ("--std=c++17", "-DNAGARE=1")


def ctype(dtype) -> str:
    return {np.dtype("float32"): "float", np.dtype("float64"): "double",
            np.dtype("float16"): "__half", np.dtype("int32"): "int"}[np.dtype(dtype)]


def template_arg(value) -> str:
    """One template argument as C++ spells it: bools as true/false, NumPy dtypes (or scalar types)
    as their C type, anything else (ints, type names already spelled) as str()."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return ctype(value)
    return str(value)


def template(name: str, *args) -> str:
    """The name expression of a template instance, e.g. ``template("lbm_fused", "float", "float",
    False, 4)`` → ``"lbm_fused<float, float, false, 4>"``; no arguments → the plain name."""
    if not args:
        return name
    return f"{name}<{', '.join(template_arg(a) for a in args)}>"


@dataclass(frozen=True)
class KernelSpec:
    """One NVRTC compilation of shaders/ source: what to compile and which kernels it must emit.

    ``source``: a path under shaders/ (e.g. "cuda/lbm2d/lbm2d.cu"), or a tuple of them compiled as
    one unit (joined by newlines). ``name_expressions``: the template instances (or plain names) the
    module emits; empty compiles the file as it is. ``options``: NVRTC options after
    :data:`DEFAULT_OPTIONS`; ``defines``: ``-DNAME=VALUE`` options after those (a mapping or pairs;
    a value of None gives ``-DNAME``); ``prelude``: generated text put before the source (e.g. a
    velocity set written out from its Python table: #define lines with commas, which nvcc would
    split if they were -D options)."""

    source: str | tuple[str, ...]
    name_expressions: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    defines: tuple[tuple[str, str | None], ...] = ()
    prelude: str = ""

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalise the arguments once, so equal specs hash equal
        if not isinstance(self.source, str):
            set_(self, "source", tuple(self.source))
        set_(self, "name_expressions", tuple(self.name_expressions))
        set_(self, "options", tuple(self.options))
        defines = self.defines.items() if isinstance(self.defines, Mapping) else self.defines
        set_(self, "defines", tuple((str(k), None if v is None else str(v)) for k, v in defines))

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source

    @property
    def code(self) -> str:
        return self.prelude + "\n".join(shaders.source(s) for s in self.sources)

    @property
    def nvrtc_options(self) -> tuple[str, ...]:
        """Every option the compiler gets, in order (part of CuPy's cache key)."""
        return DEFAULT_OPTIONS + self.options + tuple(f"-D{k}" if v is None else f"-D{k}={v}"
                                                      for k, v in self.defines)

    @property
    def label(self) -> str:
        names = ", ".join(self.name_expressions) or "(whole file)"
        return f"{'+'.join(self.sources)}: {names}"

    def compile(self):
        """The compiled ``cupy.RawModule`` (once per process and spec)."""
        return _compiled(self)

    def function(self, name: str | None = None):
        """The compiled kernel ``name`` (one of the name expressions or a plain name; default: the
        first name expression); cached, so hot paths may look it up per call."""
        if name is None:
            if not self.name_expressions:
                raise ValueError(f"{self.label}: name the kernel (the spec lists no name expressions)")
            name = self.name_expressions[0]
        return _function(self, name, _current_device())


def _current_device() -> int:
    """The current CUDA device: a ``cupy.cuda.Function`` is bound to the module loaded on the
    device that was current when it was looked up, so function caches are keyed by device (one
    process drives several GPUs when the domain is decomposed, engine/decomp)."""
    import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    return cupy.cuda.runtime.getDevice()


@cache
def _compiled(spec: KernelSpec):
    import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    progress.report(f"compiling kernels: {spec.label}")  # NVRTC (seconds a file) unless CuPy's disk cache has it
    mod = cupy.RawModule(code=spec.code, options=spec.nvrtc_options,
                         name_expressions=list(spec.name_expressions) or None)
    mod.compile()
    return mod


@cache
def _function(spec: KernelSpec, name: str, device: int):
    return _compiled(spec).get_function(name)  # RawModule loads its module once per device


def module(rel: str, name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = ()):
    """``KernelSpec(rel, name_expressions, options).compile()`` (the spec cache is shared)."""
    return KernelSpec(rel, name_expressions, options).compile()


def kernel(rel: str, name: str, name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = ()):
    """``KernelSpec(rel, name_expressions, options).function(name)``."""
    return KernelSpec(rel, name_expressions, options).function(name)


def _try_compile(spec: KernelSpec) -> str | None:
    """Pool worker of :func:`precompile` (a fresh process: its compilation lands in CuPy's disk
    cache); the error in one line, or None."""
    try:
        spec.compile()
    except Exception as exc:  # reported by the caller; the engine reports it again when it builds
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def precompile(specs: Iterable[KernelSpec], jobs: int) -> list[tuple[KernelSpec, str]]:
    """Compile ``specs`` (duplicates once) in ``jobs`` spawned processes — or here, one after the
    other, when ``jobs`` ≤ 1 — and return the ones that failed with the reason. CuPy's on-disk
    cache then serves this process's own ``compile()`` of the same specs without NVRTC."""
    todo = list(dict.fromkeys(specs))
    if jobs <= 1 or len(todo) <= 1:
        return [(s, r) for s, r in zip(todo, map(_try_compile, todo), strict=True) if r]
    ctx = multiprocessing.get_context("spawn")  # CUDA contexts do not survive fork
    reasons: dict = {}
    try:
        with concurrent.futures.ProcessPoolExecutor(min(jobs, len(todo)), mp_context=ctx) as pool:
            futures = {pool.submit(_try_compile, s): s for s in todo}
            for fut in concurrent.futures.as_completed(futures):
                reasons[futures[fut]] = fut.result()
    except BrokenProcessPool:
        # A worker died (NVRTC can take gigabytes per module: several at once may exhaust the
        # host's memory and be killed). What did not finish compiles here, one after the other.
        left = [s for s in todo if s not in reasons]
        log.warning("nagare: a compile worker died (out of host memory, or a calling script without an "
                    "`if __name__ == '__main__'` guard); compiling the other %d module(s) one at a time", len(left))
        reasons.update(zip(left, map(_try_compile, left), strict=True))
    return [(s, reasons[s]) for s in todo if reasons[s]]

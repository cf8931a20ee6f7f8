"""Compiling device code from shaders/cuda with CuPy's RawModule (NVRTC), cached.

The cache key is (file, compile options, name expressions): ``-D`` tile sizes and template
arguments are part of it, so each configuration compiles once per process (CuPy also keeps its
own on-disk cache of the binaries).
"""
from __future__ import annotations

from functools import cache

from nagare import shaders

DEFAULT_OPTIONS = ("--std=c++17", "-DNAGARE=1")


def ctype(dtype) -> str:
    import numpy as np

    return {np.dtype("float32"): "float", np.dtype("float64"): "double",
            np.dtype("float16"): "__half", np.dtype("int32"): "int"}[np.dtype(dtype)]


@cache
def module(rel: str, name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = ()):
    import cupy

    mod = cupy.RawModule(code=shaders.source(rel), options=DEFAULT_OPTIONS + tuple(options),
                         name_expressions=list(name_expressions) or None)
    mod.compile()
    return mod


@cache
def kernel(rel: str, name: str, name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = ()):
    """The compiled kernel ``name`` (a plain name or one of ``name_expressions``); cached, so hot
    paths (a tracer update, a moments pass) may look it up per call."""
    mod = module(rel, tuple(name_expressions), tuple(options))
    return mod.get_function(name)

"""Fixtures shared by the unit tests' modules."""
from __future__ import annotations

import sys

import pytest


@pytest.fixture
def emulated_cupy(tmp_path_factory, monkeypatch):
    """CuPy replaced by tests/unit/amr3d_emulated_cupy.py (RawModule compiles with g++), with the kernel
    caches of engine/cuda.py emptied before and after (a module of another fake must not serve this one)."""
    from nagare.engine import cuda as nagare_cuda

    from tests.unit import amr3d_emulated_cupy

    cp = amr3d_emulated_cupy.make(tmp_path_factory.getbasetemp())
    monkeypatch.setitem(sys.modules, "cupy", cp)
    nagare_cuda._compiled.cache_clear()
    nagare_cuda._function.cache_clear()
    yield cp
    nagare_cuda._compiled.cache_clear()
    nagare_cuda._function.cache_clear()

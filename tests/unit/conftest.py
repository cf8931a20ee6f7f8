"""Fixtures shared by the unit tests' modules."""
from __future__ import annotations

import sys

import pytest


@pytest.fixture
def install_cupy(monkeypatch):
    """``install_cupy(cp)``: a stand-in module as CuPy for the test, with the kernel caches of
    engine/cuda.py emptied before and after (a module of another stand-in must not serve this one)."""
    from nagare.engine import cuda as nagare_cuda

    def install(cp):
        monkeypatch.setitem(sys.modules, "cupy", cp)
        nagare_cuda._compiled.cache_clear()
        nagare_cuda._function.cache_clear()
        return cp

    yield install
    nagare_cuda._compiled.cache_clear()
    nagare_cuda._function.cache_clear()


@pytest.fixture
def emulated_cupy(tmp_path_factory, install_cupy):
    """CuPy replaced by tests/unit/amr3d_emulated_cupy.py (RawModule compiles with g++)."""
    from tests.unit import amr3d_emulated_cupy

    return install_cupy(amr3d_emulated_cupy.make(tmp_path_factory.getbasetemp()))

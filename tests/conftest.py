"""Shared test set-up: the gpu/slow/gui markers and a visible count of skipped GPU tests."""
from __future__ import annotations

import os

import numpy as np
import pytest
from nagare.engine.backend import cupy_available, get_backend

_GPU_OK, _GPU_REASON = cupy_available()
_skipped_gpu: list[str] = []


def pytest_configure(config):
    os.environ.setdefault("NAGARE_CACHE_DIR", str(config.rootpath / ".pytest_cache" / "nagare"))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason=f"gpu test: no usable CUDA device ({_GPU_REASON})")
    for item in items:
        if "gpu" in item.keywords and not _GPU_OK:
            item.add_marker(skip_gpu)
            _skipped_gpu.append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _skipped_gpu:
        terminalreporter.write_line(
            f"nagare: {len(_skipped_gpu)} gpu-marked tests skipped: no usable CUDA device here "
            f"({_GPU_REASON}); run them on a GPU machine with `pytest -m gpu`.", yellow=True)
    elif _GPU_OK:
        terminalreporter.write_line("nagare: gpu tests ran on a CUDA device.", green=True)


@pytest.fixture
def numpy_backend():
    return get_backend("numpy")


@pytest.fixture
def cupy_backend():
    if not _GPU_OK:
        pytest.skip(f"no usable CUDA device ({_GPU_REASON})")
    return get_backend("cupy")


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


def backends_param():
    """[numpy, cupy(gpu-marked)] for parametrising tests over backends."""
    return [pytest.param("numpy", id="numpy"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]

"""The GPU-free pieces of the CUDA–GL display path: path choice, copy geometry, log-once."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from nagare.app.gui import interop


def test_numpy_backend_uses_host_path():
    path, reason = interop.choose_path("numpy", "NVIDIA Corporation NVIDIA H200", True)
    assert path == "host" and "NumPy" in reason


def test_interop_needs_cuda_python():
    path, reason = interop.choose_path("cupy", "NVIDIA Corporation", False, "cuda-python is not installed (X)")
    assert path == "host" and "cuda-python" in reason


def test_interop_needs_gl_on_the_nvidia_gpu():
    path, reason = interop.choose_path("cupy", "Mesa llvmpipe (LLVM 15.0.6, 256 bits)", True)
    assert path == "host" and "llvmpipe" in reason
    assert interop.choose_path("cupy", "NVIDIA Corporation NVIDIA H200/PCIe/SSE2", True) == ("interop", "")


def test_plan_copy_geometry():
    a = np.zeros((48, 64), np.float32)
    plan = interop.plan_copy(a.shape, a.dtype, a.strides, (48, 64))
    assert (plan.width_bytes, plan.height, plan.src_pitch) == (256, 48, 256)
    padded = np.zeros((48, 80), np.float32)[:, :64]  # a pitched view: rows 320 bytes apart
    plan = interop.plan_copy(padded.shape, padded.dtype, padded.strides, (48, 64))
    assert plan.src_pitch == 320 and plan.width_bytes == 256


@pytest.mark.parametrize("shape,dtype,tex", [((48, 64), np.float64, (48, 64)), ((48, 64), np.float32, (64, 48)),
                                             ((2, 48, 64), np.float32, (48, 64))])
def test_plan_copy_rejects_mismatches(shape, dtype, tex):
    a = np.zeros(shape, dtype)
    with pytest.raises(ValueError):
        interop.plan_copy(a.shape, a.dtype, a.strides, tex)


def test_fallback_is_logged_once(caplog):
    msg = "display falls back to a host copy: test reason 1234"
    with caplog.at_level(logging.WARNING, logger="nagare"):
        assert interop.log_once(msg)
        assert not interop.log_once(msg)
    assert sum(msg in r.getMessage() for r in caplog.records) == 1

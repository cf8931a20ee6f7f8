"""CUDA–OpenGL interop: a CuPy snapshot goes into a GL texture without touching host memory.

CuPy has no GL interop, so this uses NVIDIA's cuda-python (``cuda.bindings.runtime``):
``cudaGraphicsGLRegisterImage`` on the texture VisPy allocated for the image, then per frame
map → ``cudaMemcpy2DToArrayAsync`` (device → the texture's cudaArray) → unmap, on a stream that
first waits for the snapshot's CUDA event (``cudaStreamWaitEvent``: the GPU orders the copy
after the snapshot, the host never waits).

Interop is only possible when the GPU that runs CUDA also drives the GL context (an NVIDIA GL
vendor, e.g. EGL on a headless H200). Anything else falls back to a host copy, and the reason is
logged once per process.

The pieces without a GPU (path choice, copy geometry, log-once) are plain functions so that they
are unit-tested everywhere; the GPU path is tested by tests/app/test_interop_gpu.py on an H200.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("nagare")

GL_TEXTURE_2D = 0x0DE1
_logged: set[str] = set()


def log_once(message: str) -> bool:
    """Log ``message`` at WARNING the first time only; True if it was logged now."""
    if message in _logged:
        return False
    _logged.add(message)
    log.warning("nagare: %s", message)
    return True


def cuda_python_runtime():
    """The cuda.bindings.runtime module, or None with the reason."""
    try:
        from cuda.bindings import runtime as cudart
    except Exception:
        try:
            from cuda import cudart  # cuda-python < 12.6 layout
        except Exception as exc:
            return None, f"cuda-python is not installed ({type(exc).__name__}); pip install nagare[gpu]"
    return cudart, ""


def choose_path(backend: str, gl_vendor: str, cudart_available: bool, cudart_reason: str = "") -> tuple[str, str]:
    """("interop", "") or ("host", reason). Pure: decided from what the caller observed."""
    if backend != "cupy":
        return "host", "the NumPy backend keeps fields in host memory"
    if not cudart_available:
        return "host", cudart_reason or "cuda-python is not installed"
    if "nvidia" not in gl_vendor.lower():
        return "host", (f"the OpenGL context is driven by '{gl_vendor}', not the NVIDIA GPU that runs "
                        f"CUDA; interop needs both on one GPU")
    return "interop", ""


@dataclass(frozen=True)
class CopyPlan:
    width_bytes: int
    height: int
    src_pitch: int


def plan_copy(shape: tuple[int, ...], dtype, strides: tuple[int, ...], texture_shape: tuple[int, int]) -> CopyPlan:
    """Geometry of a 2D device→array copy of a (rows, cols) array into a (rows, cols) texture."""
    if len(shape) != 2:
        raise ValueError(f"interop copies 2D fields; got shape {shape}")
    if tuple(shape) != tuple(texture_shape):
        raise ValueError(f"field shape {tuple(shape)} does not match the texture {tuple(texture_shape)}")
    item = np.dtype(dtype).itemsize
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"the display texture is r32f; got {np.dtype(dtype)}")
    if strides[1] != item:
        raise ValueError("rows must be contiguous for a pitched copy")
    return CopyPlan(width_bytes=shape[1] * item, height=shape[0], src_pitch=strides[0])


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


class TextureInterop:
    """One registered GL texture. Create and use only with the GL context current."""

    def __init__(self, gl_texture: int, shape: tuple[int, int], cudart=None):
        if cudart is None:
            cudart, reason = cuda_python_runtime()
            if cudart is None:
                raise RuntimeError(reason)
        self.rt = cudart
        self.shape = tuple(shape)
        self.gl_texture = int(gl_texture)
        flags = cudart.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsWriteDiscard
        self.resource = _check(cudart.cudaGraphicsGLRegisterImage(self.gl_texture, GL_TEXTURE_2D, flags),
                               "cudaGraphicsGLRegisterImage")
        self.stream = _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate")
        self.copies = 0

    def upload(self, array, event=None) -> None:
        """Copy a CuPy float32 (rows, cols) array into the texture; ordered after ``event``."""
        rt = self.rt
        plan = plan_copy(array.shape, array.dtype, array.strides, self.shape)
        if event is not None:
            _check(rt.cudaStreamWaitEvent(self.stream, event.ptr, 0), "cudaStreamWaitEvent")
        _check(rt.cudaGraphicsMapResources(1, self.resource, self.stream), "cudaGraphicsMapResources")
        try:
            dst = _check(rt.cudaGraphicsSubResourceGetMappedArray(self.resource, 0, 0),
                         "cudaGraphicsSubResourceGetMappedArray")
            _check(rt.cudaMemcpy2DToArrayAsync(dst, 0, 0, array.data.ptr, plan.src_pitch, plan.width_bytes,
                                               plan.height, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                               self.stream), "cudaMemcpy2DToArrayAsync")
        finally:
            # Unmap orders GL after the copy: GL commands issued after unmap see the new texels.
            _check(rt.cudaGraphicsUnmapResources(1, self.resource, self.stream), "cudaGraphicsUnmapResources")
        self.copies += 1

    def close(self) -> None:
        if self.resource is not None:
            self.rt.cudaGraphicsUnregisterResource(self.resource)
            self.rt.cudaStreamDestroy(self.stream)
            self.resource = None

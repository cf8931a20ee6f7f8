"""CUDA–OpenGL interop: a CuPy snapshot goes into a GL texture without touching host memory.

CuPy has no GL interop, so this uses NVIDIA's cuda-python (``cuda.bindings.runtime``):
``cudaGraphicsGLRegisterImage`` on the texture VisPy allocated for the image, then per frame
map → ``cudaMemcpy2DToArrayAsync`` (device → the texture's cudaArray) → unmap, on a stream that
first waits for the snapshot's CUDA event (``cudaStreamWaitEvent``: the GPU orders the copy
after the snapshot, the host never waits).

Interop is only possible when the GPU that runs CUDA also drives the GL context (an NVIDIA GL
vendor, e.g. EGL on a headless NVIDIA GPU). Anything else falls back to a host copy, and the reason is
logged once per process.

Lifetime: the copy reads the packet's snapshot asynchronously, after the host has moved on. If
the last reference to the CuPy array went away then, CuPy's pool would hand its memory to the
worker's next allocation (pool blocks are reused in the order of the *allocating* stream, which
knows nothing about the copy stream) and the engine could overwrite it before the copy ran. So
each upload records an event on the copy stream after the copy and :class:`InFlight` keeps the
array alive until the host sees that event done (polled, never waited for, on the next upload).

The pieces without a GPU (path choice, copy geometry, log-once, in-flight ownership) are plain
Python so that they are unit-tested everywhere; the GPU path is tested by
tests/app/test_interop_gpu.py on a GPU machine under EGL.
"""
from __future__ import annotations

import logging
import time
from collections import deque
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
        from cuda.bindings import runtime as cudart  # optional dependency (cuda-python, nagare[gpu])
    except Exception:
        try:
            from cuda import cudart  # cuda-python < 12.6 layout
        except Exception as exc:
            return None, f"cuda-python is not installed ({type(exc).__name__}); pip install nagare[gpu]"
    return cudart, ""


def poll_until_done(event, poll_s: float, stop=None) -> bool:
    """Wait until a CUDA event (``.done``) is done, sleeping ``poll_s`` between queries (the GIL
    is released while asleep); False if ``stop`` (a threading.Event) was set first.

    Never ``event.synchronize()`` on a thread that shares the GPU with the UI: a thread parked in
    cudaEventSynchronize (a spinning wait) made the other thread's CUDA calls (interop map/copy,
    event queries) wait behind it, and the display fell to a few frames/s."""
    while not event.done:
        if stop is not None and stop.is_set():
            return False
        time.sleep(poll_s)
    return True


def require_runtime(cudart=None):
    """``cudart`` as given, else cuda-python's runtime; a RuntimeError saying why when there is none."""
    if cudart is None:
        cudart, reason = cuda_python_runtime()
        if cudart is None:
            raise RuntimeError(reason)
    return cudart


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


def plan_copy(shape: tuple[int, ...], dtype, strides: tuple[int, ...], texture_shape: tuple[int, ...]) -> CopyPlan:
    """Geometry of a 2D device→array copy of a float32 (rows, cols) array into an r32f texture of
    that shape, or of a (rows, cols, 4) array into an rgba32f one (the splatted particles)."""
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] != 4):
        raise ValueError(f"interop copies 2D fields or (rows, cols, 4) images; got shape {shape}")
    if tuple(shape) != tuple(texture_shape):
        raise ValueError(f"field shape {tuple(shape)} does not match the texture {tuple(texture_shape)}")
    item = np.dtype(dtype).itemsize
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"the display texture is r32f or rgba32f; got {np.dtype(dtype)}")
    texel = item * (shape[2] if len(shape) == 3 else 1)
    if strides[1] != texel or (len(shape) == 3 and strides[2] != item):
        raise ValueError("rows must be contiguous for a pitched copy")
    return CopyPlan(width_bytes=shape[1] * texel, height=shape[0], src_pitch=strides[0])


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


class InFlight:
    """Objects the GPU may still read, each held until an event recorded after its last use is done.

    ``event`` needs ``.done`` (non-blocking query) and ``.synchronize()``: a CuPy event or a fake.
    """

    def __init__(self):
        self._items: deque = deque()

    def hold(self, obj, event) -> None:
        self._items.append((event, obj))

    def release_done(self) -> int:
        """Drop the objects whose events have completed (never blocks); returns how many are still held."""
        self._items = deque(item for item in self._items if not item[0].done)
        return len(self._items)

    def wait_all(self) -> None:
        """Block until every held object's event is done, then drop them (teardown only)."""
        while self._items:
            event, _ = self._items.popleft()
            event.synchronize()

    def __len__(self) -> int:
        return len(self._items)


def _cupy_event_recorder(stream):
    """record() → a CuPy event recorded now on the cuda-python ``stream``."""
    import cupy  # optional dependency (CuPy, nagare[gpu]): only the interop path gets here

    ext = cupy.cuda.ExternalStream(int(stream))

    def record():
        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(ext)
        return ev
    return record


class TextureInterop:
    """One registered GL texture. Create and use only with the GL context current."""

    def __init__(self, gl_texture: int, shape: tuple[int, ...], cudart=None, record_event=None):
        self.rt = cudart = require_runtime(cudart)
        self.shape = tuple(shape)
        self.gl_texture = int(gl_texture)
        flags = cudart.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsWriteDiscard
        self.resource = _check(cudart.cudaGraphicsGLRegisterImage(self.gl_texture, GL_TEXTURE_2D, flags),
                               "cudaGraphicsGLRegisterImage")
        self.stream = _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate")
        self._record_event = record_event or _cupy_event_recorder(self.stream)
        self.in_flight = InFlight()
        self.copies = 0

    def upload(self, array, event=None) -> None:
        """Copy a CuPy float32 (rows, cols) array — or (rows, cols, 4) into an rgba32f texture — into
        the texture; ordered after ``event``.

        ``array`` stays referenced here until the copy has run on the GPU (see the module doc)."""
        rt = self.rt
        plan = plan_copy(array.shape, array.dtype, array.strides, self.shape)
        self.in_flight.release_done()
        if event is not None:
            _check(rt.cudaStreamWaitEvent(self.stream, event.ptr, 0), "cudaStreamWaitEvent")
        try:
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
        finally:
            # An event after the copy (after whatever of it was enqueued): until it is done the
            # array must not return to CuPy's pool.
            self.in_flight.hold(array, self._record_event())
        self.copies += 1

    def close(self) -> None:
        if self.resource is not None:
            self.in_flight.wait_all()  # no array may go back to the pool while a copy still reads it
            self.rt.cudaGraphicsUnregisterResource(self.resource)
            self.rt.cudaStreamDestroy(self.stream)
            self.resource = None


# ---- 3D textures and vertex buffers (the 3D views) ----------------------------------------------------
GL_TEXTURE_3D = 0x806F


@dataclass(frozen=True)
class CopyPlan3D:
    width_bytes: int  # one row
    width: int  # elements per row (a cudaArray's extent is in elements)
    height: int
    depth: int
    src_pitch: int


def plan_copy3d(shape: tuple[int, ...], dtype, strides: tuple[int, ...], texture_shape: tuple[int, ...]) -> CopyPlan3D:
    """Geometry of a device → 3D-array copy of a C-contiguous (nz, ny, nx) float32 array."""
    if len(shape) != 3:
        raise ValueError(f"a 3D texture copy needs a 3D field; got shape {shape}")
    if tuple(shape) != tuple(texture_shape):
        raise ValueError(f"field shape {tuple(shape)} does not match the texture {tuple(texture_shape)}")
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"the volume texture is r32f; got {np.dtype(dtype)}")
    item = 4
    nz, ny, nx = shape
    if strides != (ny * nx * item, nx * item, item):
        raise ValueError("the volume must be C-contiguous")
    return CopyPlan3D(width_bytes=nx * item, width=nx, height=ny, depth=nz, src_pitch=nx * item)


def plan_buffer(nbytes_src: int, nbytes_buffer: int, contiguous: bool) -> int:
    """Bytes of a device → GL-buffer copy; the buffer must hold the array exactly."""
    if not contiguous:
        raise ValueError("a vertex buffer copy needs a C-contiguous array")
    if nbytes_src != nbytes_buffer:
        raise ValueError(f"the array has {nbytes_src} bytes, the GL buffer {nbytes_buffer}")
    return int(nbytes_src)


class _Registered:
    """Shared by the 3D interops: a registered GL object, its own stream and the in-flight arrays."""

    def _init(self, cudart, record_event):
        self.rt = cudart = require_runtime(cudart)
        self.stream = _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate")
        self._record_event = record_event or _cupy_event_recorder(self.stream)
        self.in_flight = InFlight()
        self.copies = 0

    def _mapped(self, array, event, copy) -> None:
        rt = self.rt
        self.in_flight.release_done()
        if event is not None:
            _check(rt.cudaStreamWaitEvent(self.stream, event.ptr, 0), "cudaStreamWaitEvent")
        try:
            _check(rt.cudaGraphicsMapResources(1, self.resource, self.stream), "cudaGraphicsMapResources")
            try:
                copy()
            finally:
                _check(rt.cudaGraphicsUnmapResources(1, self.resource, self.stream), "cudaGraphicsUnmapResources")
        finally:
            self.in_flight.hold(array, self._record_event())
        self.copies += 1

    def close(self) -> None:
        if self.resource is not None:
            self.in_flight.wait_all()
            self.rt.cudaGraphicsUnregisterResource(self.resource)
            self.rt.cudaStreamDestroy(self.stream)
            self.resource = None


class VolumeInterop(_Registered):
    """A registered GL 3D texture (r32f, shape (nz, ny, nx)) written by ``cudaMemcpy3DAsync``.

    ``cudaGraphicsGLRegisterImage`` takes GL_TEXTURE_3D as it takes GL_TEXTURE_2D; the mapped
    cudaArray is 3D and the copy goes from a pitched device pointer (the CuPy snapshot)."""

    def __init__(self, gl_texture: int, shape: tuple[int, int, int], cudart=None, record_event=None):
        self._init(cudart, record_event)
        self.shape = tuple(shape)
        self.gl_texture = int(gl_texture)
        flags = self.rt.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsWriteDiscard
        self.resource = _check(self.rt.cudaGraphicsGLRegisterImage(self.gl_texture, GL_TEXTURE_3D, flags),
                               "cudaGraphicsGLRegisterImage(GL_TEXTURE_3D)")

    def upload(self, array, event=None) -> None:
        rt = self.rt
        plan = plan_copy3d(tuple(array.shape), array.dtype, tuple(array.strides), self.shape)

        def copy():
            dst = _check(rt.cudaGraphicsSubResourceGetMappedArray(self.resource, 0, 0),
                         "cudaGraphicsSubResourceGetMappedArray")
            p = rt.cudaMemcpy3DParms()
            p.srcPtr = rt.make_cudaPitchedPtr(array.data.ptr, plan.src_pitch, plan.width, plan.height)
            p.dstArray = dst
            p.extent = rt.make_cudaExtent(plan.width, plan.height, plan.depth)
            p.kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
            _check(rt.cudaMemcpy3DAsync(p, self.stream), "cudaMemcpy3DAsync")

        self._mapped(array, event, copy)


class BufferInterop(_Registered):
    """A registered GL buffer (a VBO: particle positions or values) written by ``cudaMemcpyAsync``
    into the pointer ``cudaGraphicsResourceGetMappedPointer`` gives."""

    def __init__(self, gl_buffer: int, nbytes: int, cudart=None, record_event=None):
        self._init(cudart, record_event)
        self.nbytes = int(nbytes)
        self.gl_buffer = int(gl_buffer)
        flags = self.rt.cudaGraphicsRegisterFlags.cudaGraphicsRegisterFlagsWriteDiscard
        self.resource = _check(self.rt.cudaGraphicsGLRegisterBuffer(self.gl_buffer, flags),
                               "cudaGraphicsGLRegisterBuffer")

    def upload(self, array, event=None) -> None:
        rt = self.rt
        n = plan_buffer(int(array.nbytes), self.nbytes, bool(array.flags.c_contiguous))

        def copy():
            ptr, size = _check(rt.cudaGraphicsResourceGetMappedPointer(self.resource),
                               "cudaGraphicsResourceGetMappedPointer")
            if int(size) < n:
                raise RuntimeError(f"the mapped GL buffer has {int(size)} bytes, {n} needed")
            _check(rt.cudaMemcpyAsync(ptr, array.data.ptr, n, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                      self.stream), "cudaMemcpyAsync")

        self._mapped(array, event, copy)

"""A display texture that CUDA fills without mapping it every frame.

:class:`~nagare.app.gui.interop.TextureInterop` maps the registered GL texture around each copy
(``cudaGraphicsMapResources`` → copy → ``cudaGraphicsUnmapResources``). Map and unmap are
operations of both the CUDA and the GL context; on a GPU that runs the simulation's CUDA context
and the window's GL context by time slices, each can cost a switch between the two. Measured
with ``bench_display --timeline`` (lbm2d-cylinder 2048², docs/decisions.md D24): writing the
field's texture takes ~0.8 ms of the
simulation's GPU time per frame, as much as drawing the frame itself. These buffers do not remove
that cost (it is paid per write, whichever API writes), but the frame interleaves with the
simulation less often (2.2 instead of 2.9 slowed iterations a frame) and, with the texture at the
screen's resolution (grid_lod.py), took 0.08–0.2 ms less a frame than the mapped texture in 4 of 4
paired runs.

Here the memory both APIs use is allocated once and stays mapped in both for its whole life:

- CUDA allocates it with its virtual-memory API as exportable (``cuMemCreate`` with a POSIX file
  descriptor as shareable handle) and maps it into its address space;
- GL imports that descriptor (``GL_EXT_memory_object_fd``) as a memory object and makes a pixel
  unpack buffer of it (``glBufferStorageMemEXT``).

A frame: the packet's field is copied into the buffer on a private CUDA stream (CUDA context
only, no GL involved); the UI thread waits for that copy with the GIL released (polling, tens of
microseconds — the same wait :mod:`interop`'s unmap makes GL do on the GPU); GL then copies the
buffer into the texture with ``glTexSubImage2D`` from the bound unpack buffer — within the GL
work of the frame, so the frame's GL side is one piece of work — and a GL fence marks when GL has
read it. Two buffers alternate; the copy into one waits for the fence of GL's last read of it (in
practice signalled a frame earlier). No map, no unmap, no cross-API semaphore.

The VisPy texture keeps its own storage (``glTexSubImage2D`` writes into it), so the Image visual,
its shaders and the host path are unchanged. Given the canvas' field image (a
:class:`~nagare.app.gui.buffer_field.FieldImage`), a single-channel field skips that write: the image
samples the buffer itself from the next draw on, and the fence of a buffer is set when the next upload
turns to the other one (every draw that read it is queued by then). Any failure to set this up (a driver without the
GL extension, an older cuda-python) raises here; the canvas then falls back to
:class:`~nagare.app.gui.interop.TextureInterop` and says so once.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .interop import InFlight, _check, _cupy_event_recorder, plan_copy, poll_until_done, require_runtime

GL_PIXEL_UNPACK_BUFFER = 0x88EC
GL_HANDLE_TYPE_OPAQUE_FD_EXT = 0x9586
GL_SYNC_GPU_COMMANDS_COMPLETE = 0x9117
GL_TIMEOUT_EXPIRED = 0x911B
GL_WAIT_FAILED = 0x911D
GL_SYNC_FLUSH_COMMANDS_BIT = 0x1
REQUIRED_EXTENSIONS = ("GL_EXT_memory_object", "GL_EXT_memory_object_fd")
BUFFER_SAMPLING_EXTENSION = "GL_EXT_gpu_shader4"  # samplerBuffer / texelFetchBuffer in GLSL 1.20
GL_MAX_TEXTURE_BUFFER_SIZE = 0x8C2B


def gl_extensions() -> set[str]:
    """The current GL context's extension names."""
    # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
    from OpenGL import GL

    n = int(GL.glGetIntegerv(GL.GL_NUM_EXTENSIONS))
    names = set()
    for i in range(n):
        name = GL.glGetStringi(GL.GL_EXTENSIONS, i)
        names.add(name.decode() if isinstance(name, bytes) else str(name))
    return names


def buffer_sampling_fits(shape: tuple[int, ...], extensions: set[str]) -> bool:
    """Whether the current GL context can draw a (rows, cols) float32 field from a buffer texture:
    samplerBuffer in GLSL 1.20 (GL_EXT_gpu_shader4), glTexBuffer (GL ≥ 3.1 or
    GL_ARB_texture_buffer_object) and rows × cols within GL_MAX_TEXTURE_BUFFER_SIZE (2²⁷ texels on
    NVIDIA: a 16384² field shown cell for cell would not fit, and would silently read wrong texels)."""
    # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
    from OpenGL import GL

    if BUFFER_SAMPLING_EXTENSION not in extensions:
        return False
    version = (int(GL.glGetIntegerv(GL.GL_MAJOR_VERSION)), int(GL.glGetIntegerv(GL.GL_MINOR_VERSION)))
    if version < (3, 1) and "GL_ARB_texture_buffer_object" not in extensions:
        return False
    return int(np.prod(shape[:2])) <= int(GL.glGetIntegerv(GL_MAX_TEXTURE_BUFFER_SIZE))


class ExportedAllocation:
    """Device memory from CUDA's virtual-memory API, mapped read-write for this device and
    exportable as a POSIX file descriptor (:meth:`export_fd`: a new descriptor each call)."""

    def __init__(self, nbytes: int, cudart=None):
        # optional dependency (cuda-python, nagare[gpu])
        from cuda.bindings import driver as cu

        cudart = require_runtime(cudart)
        self.cu = cu
        _check(cudart.cudaFree(0), "cudaFree(0)")  # the runtime's primary context, current in this thread
        dev = int(_check(cudart.cudaGetDevice(), "cudaGetDevice"))
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = dev
        gran = int(_check(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            "cuMemGetAllocationGranularity"))
        self.size = -(-int(nbytes) // gran) * gran
        self.handle = _check(cu.cuMemCreate(self.size, prop, 0), "cuMemCreate")
        self.ptr = None
        try:
            self.ptr = _check(cu.cuMemAddressReserve(self.size, gran, 0, 0), "cuMemAddressReserve")
            _check(cu.cuMemMap(self.ptr, self.size, 0, self.handle, 0), "cuMemMap")
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = dev
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _check(cu.cuMemSetAccess(self.ptr, self.size, [access], 1), "cuMemSetAccess")
        except Exception:
            self.close()
            raise
        self.address = int(self.ptr)

    def export_fd(self) -> int:
        fd = _check(self.cu.cuMemExportToShareableHandle(
            self.handle, self.cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle")
        return int(fd)

    def close(self) -> None:
        cu = self.cu
        if self.ptr is not None:
            cu.cuMemUnmap(self.ptr, self.size)
            cu.cuMemAddressFree(self.ptr, self.size)
            self.ptr = None
        if self.handle is not None:
            cu.cuMemRelease(self.handle)
            self.handle = None


def wait_fence(fence, poll_s: float, what: str) -> None:
    """Until the GL fence is signalled, polling (the GIL released between polls).

    Asked first without a flush: a fence made before a frame's end went to the GPU with that frame,
    and a flush here would send the GL commands queued since as work of their own — one more switch
    of the GPU between the simulation's CUDA context and GL's. Flushed once where it is not yet
    signalled (it may not have been sent)."""
    # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
    from OpenGL import GL

    r = GL.glClientWaitSync(fence, 0, 0)
    if r == GL_TIMEOUT_EXPIRED:
        r = GL.glClientWaitSync(fence, GL_SYNC_FLUSH_COMMANDS_BIT, 0)
    while r == GL_TIMEOUT_EXPIRED:
        time.sleep(poll_s)
        r = GL.glClientWaitSync(fence, 0, 0)
    if r == GL_WAIT_FAILED:
        raise RuntimeError(f"glClientWaitSync failed on {what}")


class ImportedBuffer:
    """Memory CUDA allocated (:class:`ExportedAllocation`) that GL imports as a memory object and
    makes a buffer of: GL's ``buffer`` (bound to ``target`` while its storage is set) and CUDA's
    ``alloc.address`` are the same bytes, mapped in both APIs for the buffer's whole life."""

    def __init__(self, nbytes: int, target: int, cudart):
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL
        from OpenGL.GL.EXT.memory_object import glBufferStorageMemEXT, glCreateMemoryObjectsEXT
        from OpenGL.GL.EXT.memory_object_fd import glImportMemoryFdEXT

        self.memory = self.buffer = None
        self.alloc = ExportedAllocation(nbytes, cudart)
        try:
            ids = np.zeros(1, np.uint32)
            glCreateMemoryObjectsEXT(1, ids)
            self.memory = int(ids[0])
            fd = self.alloc.export_fd()  # exported last: nothing between here and the import can fail
            try:
                glImportMemoryFdEXT(self.memory, self.alloc.size, GL_HANDLE_TYPE_OPAQUE_FD_EXT, fd)
            except Exception:
                os.close(fd)  # a successful import hands the descriptor to GL; a failed one does not
                raise
            self.buffer = int(GL.glGenBuffers(1))
            GL.glBindBuffer(target, self.buffer)
            try:
                glBufferStorageMemEXT(target, nbytes, self.memory, 0)
            finally:
                GL.glBindBuffer(target, 0)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        """GL's buffer and memory object, then CUDA's memory (the caller makes sure neither API still
        uses it)."""
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL

        if self.buffer is not None:
            GL.glDeleteBuffers(1, [self.buffer])
            self.buffer = None
        if self.memory is not None:
            from OpenGL.GL.EXT.memory_object import glDeleteMemoryObjectsEXT

            glDeleteMemoryObjectsEXT(1, np.array([self.memory], np.uint32))
            self.memory = None
        self.alloc.close()


class _Slot:
    """One shared buffer: CUDA's allocation and GL's pixel unpack buffer of it, GL's last read."""

    def __init__(self, nbytes: int, cudart):
        self.fence = None
        self.shared = ImportedBuffer(nbytes, GL_PIXEL_UNPACK_BUFFER, cudart)
        self.alloc, self.buffer = self.shared.alloc, self.shared.buffer

    def wait_gl_done(self, poll_s: float) -> None:
        """Until GL has run the last copy out of this buffer (its fence), polling."""
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL

        if self.fence is None:
            return
        try:
            wait_fence(self.fence, poll_s, "a shared display buffer")
        finally:
            GL.glDeleteSync(self.fence)
            self.fence = None

    def close(self) -> None:
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL

        if self.fence is not None:
            GL.glDeleteSync(self.fence)
            self.fence = None
        self.shared.close()


class SharedTexture:
    """A GL texture (VisPy's, ``r32f`` (rows, cols) or ``rgba32f`` (rows, cols, 4)) filled from
    CuPy arrays through buffers CUDA and GL share. Same interface as
    :class:`~nagare.app.gui.interop.TextureInterop`; create and use with the GL context current."""

    poll_s = 5e-5  # the copy into the buffer takes tens of microseconds: poll finely
    slots = 2
    # Parts of upload() that bench_display's experiments leave out ("cuda-copy", "gl-write") to
    # find which one costs the simulation its GPU time; empty in the app.
    skip: frozenset[str] = frozenset()

    def __init__(self, gl_texture: int, shape: tuple[int, ...], cudart=None, record_event=None, image=None):
        extensions = gl_extensions()
        missing = [e for e in REQUIRED_EXTENSIONS if e not in extensions]
        if missing:
            raise RuntimeError(f"the GL context lacks {', '.join(missing)}")
        self.rt = cudart = require_runtime(cudart)
        self.shape = tuple(shape)
        self.gl_texture = int(gl_texture)
        channels = self.shape[2] if len(self.shape) == 3 else 1
        # A FieldImage (buffer_field.py) given: it draws straight from the buffer CUDA filled and
        # the texture is never written (one GL copy a frame less). Needs samplerBuffer in GLSL 1.20.
        drawable = image is not None and channels == 1 and buffer_sampling_fits(self.shape, extensions)
        self.image = image if drawable else None
        self._shown: _Slot | None = None  # the buffer the image samples (image mode)
        self.nbytes = int(np.prod(self.shape[:2])) * 4 * channels
        self.pitch = self.shape[1] * 4 * channels
        self._format = {1: 0x1903, 4: 0x1908}[channels]  # GL_RED, GL_RGBA
        self._slots: list[_Slot] = []
        self.stream = None
        try:
            for _ in range(self.slots):
                self._slots.append(_Slot(self.nbytes, cudart))
            self.stream = _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate")
        except Exception:
            self.close()
            raise
        self._record_event = record_event or _cupy_event_recorder(self.stream)
        self._next = 0
        self.in_flight = InFlight()  # always empty after upload(): it waits for its copy
        self.copies = 0

    def upload(self, array, event=None) -> None:
        """Copy ``array`` (float32, rows contiguous) into the texture, ordered after ``event``."""
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL

        rt = self.rt
        plan = plan_copy(array.shape, array.dtype, array.strides, self.shape)
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if self.image is not None and self._shown is not None and self._shown.fence is None:
            # every draw that read the shown buffer is queued by now: the fence follows them
            self._shown.fence = GL.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        slot.wait_gl_done(self.poll_s)  # GL's last read of this buffer is done before CUDA writes it
        if "cuda-copy" not in self.skip:
            if event is not None:
                _check(rt.cudaStreamWaitEvent(self.stream, event.ptr, 0), "cudaStreamWaitEvent")
            _check(rt.cudaMemcpy2DAsync(slot.alloc.address, self.pitch, array.data.ptr, plan.src_pitch,
                                        plan.width_bytes, plan.height, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                        self.stream), "cudaMemcpy2DAsync")
            poll_until_done(self._record_event(), self.poll_s)  # the copy is done before GL reads the buffer
        if self.image is not None:  # the image reads this buffer from the next draw on
            self.image.sample_buffer(slot.buffer, self.shape)
            self._shown = slot
            self.copies += 1
            return
        if "gl-write" in self.skip:
            self.copies += 1
            return
        # GL: buffer → texture, inside this frame's GL work; VisPy's bindings restored after.
        bound = int(GL.glGetIntegerv(GL.GL_TEXTURE_BINDING_2D))
        align = int(GL.glGetIntegerv(GL.GL_UNPACK_ALIGNMENT))
        GL.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, slot.buffer)
        try:
            GL.glBindTexture(GL.GL_TEXTURE_2D, self.gl_texture)
            GL.glPixelStorei(GL.GL_UNPACK_ALIGNMENT, 4)
            GL.glTexSubImage2D(GL.GL_TEXTURE_2D, 0, 0, 0, self.shape[1], self.shape[0], self._format,
                               GL.GL_FLOAT, None)
        finally:
            GL.glPixelStorei(GL.GL_UNPACK_ALIGNMENT, align)
            GL.glBindTexture(GL.GL_TEXTURE_2D, bound)
            GL.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0)
        slot.fence = GL.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        self.copies += 1

    def close(self) -> None:
        """Free both sides (GL context current): GL's objects first, then CUDA's memory; every
        slot and the stream even when one of them fails (the first error is raised after)."""
        # PyOpenGL (≈0.2 s) loads on the shared-buffer (interop) display path only
        from OpenGL import GL

        error = None
        if self.image is not None:  # back to its own texture before the buffers go
            self.image.sample_buffer(None)
            if self._shown is not None and self._shown.fence is None:
                self._shown.fence = GL.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
            self._shown = None
        if self.stream is not None:
            self.rt.cudaStreamSynchronize(self.stream)
        for slot in self._slots:
            try:
                slot.wait_gl_done(self.poll_s)
            except Exception as exc:
                error = error or exc
            finally:
                slot.close()
        self._slots = []
        if self.stream is not None:
            self.rt.cudaStreamDestroy(self.stream)
            self.stream = None
        if error is not None:
            raise error

"""Vertex buffers CUDA writes without mapping them every frame.

:class:`~nagare.app.gui.interop.BufferInterop` maps the registered GL buffer around each copy
(``cudaGraphicsMapResources`` → copy → ``cudaGraphicsUnmapResources``). Map and unmap are work of
both the CUDA and the GL context: on a GPU that runs the simulation's CUDA context and the window's
GL context by time slices, the pair costs a switch of its own. Measured with ``bench_display
--timeline`` on an H200 (lbm2d-cylinder 2048², its tracers the one mapped buffer): drawing without
the tracers took 0.67 ms less of the simulation's GPU time a frame and one slowed iteration less
(1.23 against 1.90 ms, 2.2 against 3.2) — the tracers' own draw is a few microseconds of GL work.

Here, as for the field (:mod:`shared_texture`), the memory is allocated once by CUDA's
virtual-memory API as exportable, imported into GL as a memory object and made a buffer
(``glBufferStorageMemEXT``) that stays mapped in both APIs for its whole life. VisPy's vertex buffer
object keeps its id; its GL handle is pointed at the imported buffer (and every program that bound
the old handle to an attribute follows), and pointed back on :meth:`SharedVertexBuffer.close`, so
VisPy can resize or refill its own buffer again.

Ordering without map or unmap: a write first waits for the canvas' :class:`FrameFence` — a GL
fence set after each drawn frame, so it reaches the GPU with that frame's own work and is
normally signalled long before the next upload — then copies on a private stream and waits for
that copy (tens of microseconds, the GIL released) before GL draws from the buffer.
"""
from __future__ import annotations

from .interop import _check, _cupy_event_recorder, plan_buffer, poll_until_done, require_runtime
from .shared_texture import (
    GL_SYNC_GPU_COMMANDS_COMPLETE,
    REQUIRED_EXTENSIONS,
    ImportedBuffer,
    gl_extensions,
    wait_fence,
)

GL_ARRAY_BUFFER = 0x8892


class FrameFence:
    """A GL fence after the newest drawn frame that read a shared vertex buffer.

    The canvas calls :meth:`mark` at the end of each draw (a no-op until a buffer has been
    written); a write waits for the newest fence with :meth:`wait`. The fence is queued before the
    frame's swap (or ``glFinish``) and goes to the GPU with it: asked without a flush, it is
    normally signalled already, and no GL work of its own is sent."""

    def __init__(self):
        self.fence = None
        self.armed = False  # a shared buffer was written: frames that draw it need a fence

    def mark(self) -> None:
        if not self.armed:
            return
        from OpenGL import GL  # the shared-buffer (interop) path only

        if self.fence is not None:
            GL.glDeleteSync(self.fence)  # the newer fence follows every command the older one did
        self.fence = GL.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0)

    def wait(self, poll_s: float) -> None:
        """Until GL has run every frame drawn so far (polling, the GIL released between polls)."""
        if self.fence is not None:
            wait_fence(self.fence, poll_s, "a frame that drew shared vertex buffers")

    def close(self) -> None:
        if self.fence is not None:
            from OpenGL import GL

            GL.glDeleteSync(self.fence)
            self.fence = None


def repoint_attributes(parser, old: int, new: int) -> int:
    """Every GLIR program of ``parser`` that bound GL buffer ``old`` to an attribute binds ``new``
    instead; returns how many attributes changed. VisPy's programs keep the handle they were given
    when the attribute was set and bind it before each draw (gloo.glir.GlirProgram._pre_draw)."""
    changed = 0
    for obj in list(parser._objects.values()):
        attributes = getattr(obj, "_attributes", None)
        if not isinstance(attributes, dict):
            continue
        for name, entry in list(attributes.items()):
            if entry[0] == old:
                attributes[name] = (new,) + tuple(entry[1:])
                changed += 1
    return changed


class SharedVertexBuffer:
    """A VisPy vertex buffer whose GL storage is memory CUDA writes directly. Create and use with
    the canvas' GL context current; ``nbytes`` is the buffer's size as VisPy allocated it."""

    poll_s = 5e-5  # the copy takes microseconds: poll finely

    def __init__(self, vbo, nbytes: int, canvas, cudart=None, record_event=None):
        missing = [e for e in REQUIRED_EXTENSIONS if e not in gl_extensions()]
        if missing:
            raise RuntimeError(f"the GL context lacks {', '.join(missing)}")
        self.rt = cudart = require_runtime(cudart)
        self.nbytes = int(nbytes)
        self.parser = canvas.context.shared.parser
        self.glir_object = self.parser._objects[vbo.id]
        self.fence: FrameFence = canvas.frame_fence
        self.stream = self.original = None
        self.shared = ImportedBuffer(self.nbytes, GL_ARRAY_BUFFER, cudart)
        self.buffer = self.shared.buffer
        try:
            self.stream = _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking),
                                 "cudaStreamCreate")
            self._record_event = record_event or _cupy_event_recorder(self.stream)
        except Exception:
            if self.stream is not None:
                cudart.cudaStreamDestroy(self.stream)
            self.shared.close()
            raise
        # VisPy's buffer object draws from the imported storage from now on
        self.original = int(self.glir_object._handle)
        self.glir_object._handle = self.buffer
        repoint_attributes(self.parser, self.original, self.buffer)
        self.copies = 0

    def upload(self, array, event=None) -> None:
        """Copy the CuPy array (C-contiguous, exactly ``nbytes``) into the buffer after ``event``,
        once GL has drawn the frames that read it; returns when the copy is done."""
        rt = self.rt
        n = plan_buffer(int(array.nbytes), self.nbytes, bool(array.flags.c_contiguous))
        self.fence.wait(self.poll_s)
        if event is not None:
            _check(rt.cudaStreamWaitEvent(self.stream, event.ptr, 0), "cudaStreamWaitEvent")
        _check(rt.cudaMemcpyAsync(self.shared.alloc.address, array.data.ptr, n,
                                  rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice, self.stream), "cudaMemcpyAsync")
        poll_until_done(self._record_event(), self.poll_s)  # done before GL draws from the buffer
        self.fence.armed = True
        self.copies += 1

    def close(self) -> None:
        """VisPy's own buffer back in place, then GL's objects and CUDA's memory freed (after GL
        and CUDA are done with them)."""
        from OpenGL import GL

        if self.original is not None:
            self.glir_object._handle = self.original
            repoint_attributes(self.parser, self.buffer, self.original)
            self.original = None
        if self.stream is not None:
            self.rt.cudaStreamSynchronize(self.stream)
            self.rt.cudaStreamDestroy(self.stream)
            self.stream = None
        if self.buffer is not None:
            GL.glFinish()  # every draw that read the imported memory is done before it goes
            self.shared.close()
            self.buffer = None

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
    rgba = np.zeros((48, 64, 4), np.float32)  # the splatted particles' image (rgba32f)
    plan = interop.plan_copy(rgba.shape, rgba.dtype, rgba.strides, (48, 64, 4))
    assert (plan.width_bytes, plan.height, plan.src_pitch) == (1024, 48, 1024)


@pytest.mark.parametrize("shape,dtype,tex", [((48, 64), np.float64, (48, 64)), ((48, 64), np.float32, (64, 48)),
                                             ((2, 48, 64), np.float32, (48, 64)),
                                             ((48, 64, 3), np.float32, (48, 64, 3)),
                                             ((48, 64, 4), np.float32, (48, 64))])
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


# ---- ownership of the snapshot while the interop copy may still read it ----------------------
class FakeEvent:
    def __init__(self, log=None, done=False):
        self.done = done
        self.synced = False
        if log is not None:
            log.append("record")

    def synchronize(self):
        self.synced = True
        self.done = True


class FakeDeviceArray:
    """What upload() reads of a CuPy array: shape, dtype, strides, data.ptr."""

    class _Mem:
        ptr = 0xD0000

    def __init__(self, shape):
        a = np.zeros(shape, np.float32)
        self.shape, self.dtype, self.strides, self.data = a.shape, a.dtype, a.strides, self._Mem()


class FakeCudart:
    """Just enough of cuda.bindings.runtime to drive TextureInterop; logs the calls in order."""

    class cudaGraphicsRegisterFlags:
        cudaGraphicsRegisterFlagsWriteDiscard = 2

    class cudaMemcpyKind:
        cudaMemcpyDeviceToDevice = 3

    cudaStreamNonBlocking = 1

    def __init__(self, fail_copy=False):
        self.calls: list[str] = []
        self.fail_copy = fail_copy

    def __getattr__(self, name):
        if not name.startswith("cuda"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            if name == "cudaMemcpy2DToArrayAsync" and self.fail_copy:
                return (700,)
            if name in ("cudaGraphicsGLRegisterImage", "cudaStreamCreateWithFlags",
                        "cudaGraphicsSubResourceGetMappedArray"):
                return (0, f"<{name}>")
            return (0,)
        return call


def _interop(rt):
    events: list[FakeEvent] = []

    def record():
        events.append(FakeEvent(rt.calls))
        return events[-1]
    return interop.TextureInterop(7, (4, 6), cudart=rt, record_event=record), events


def test_in_flight_holds_until_event_done_and_never_blocks():
    held = interop.InFlight()
    a, b = FakeEvent(), FakeEvent()
    held.hold("a", a)
    held.hold("b", b)
    assert held.release_done() == 2
    b.done = True  # events may complete out of hold order (other streams): each is checked
    assert held.release_done() == 1 and not a.synced
    held.hold("c", FakeEvent(done=True))
    assert held.release_done() == 1
    held.wait_all()
    assert a.synced and len(held) == 0


def test_upload_keeps_the_snapshot_alive_until_its_copy_completed():
    import gc
    import weakref

    rt = FakeCudart()
    tex, events = _interop(rt)
    arr = FakeDeviceArray((4, 6))
    ref = weakref.ref(arr)
    tex.upload(arr, event=type("Ev", (), {"ptr": 1})())
    # the release event is recorded after the copy and after the unmap, on the copy stream
    assert rt.calls[-6:] == ["cudaStreamWaitEvent", "cudaGraphicsMapResources",
                             "cudaGraphicsSubResourceGetMappedArray", "cudaMemcpy2DToArrayAsync",
                             "cudaGraphicsUnmapResources", "record"]
    del arr  # the packet is gone on the UI side (a newer one replaced it) ...
    gc.collect()
    assert ref() is not None  # ... but the copy has not run yet: the memory must not return to the pool
    tex.upload(FakeDeviceArray((4, 6)))
    gc.collect()
    assert ref() is not None and len(tex.in_flight) == 2
    events[0].done = True
    tex.upload(FakeDeviceArray((4, 6)))  # each upload releases what has completed, without waiting
    gc.collect()
    assert ref() is None and len(tex.in_flight) == 2
    tex.close()  # teardown waits for the copies still in flight before unregistering
    assert all(e.synced for e in events[1:]) and len(tex.in_flight) == 0
    assert rt.calls[-2:] == ["cudaGraphicsUnregisterResource", "cudaStreamDestroy"]


def test_a_failed_copy_still_holds_the_snapshot():
    rt = FakeCudart(fail_copy=True)
    tex, events = _interop(rt)
    with pytest.raises(RuntimeError, match="cudaMemcpy2DToArrayAsync"):
        tex.upload(FakeDeviceArray((4, 6)))
    assert rt.calls[-2:] == ["cudaGraphicsUnmapResources", "record"] and len(tex.in_flight) == 1
    assert tex.copies == 0


# ---- the canvas' choice between shared display buffers and a texture mapped per copy ----------
class _Upload:
    """Stands for SharedTexture / TextureInterop: records uploads, or fails as told."""

    made: list = []

    def __init__(self, handle, shape, fail_init=False, fail_upload=False):
        if fail_init:
            raise RuntimeError("the GL context lacks GL_EXT_memory_object_fd")
        self.shape, self.fail_upload, self.uploads, self.closed = shape, fail_upload, [], False
        _Upload.made.append(self)

    def upload(self, array, event=None):
        if self.fail_upload:
            raise RuntimeError("glTexSubImage2D: GL_INVALID_OPERATION")
        self.uploads.append(array)

    def close(self):
        self.closed = True


def _fake_canvas(monkeypatch, shared_init_fails=False, shared_upload_fails=False, mapped_fails=False):
    """A stand-in for FieldCanvas with the real upload-choice methods and fake upload classes."""
    from types import SimpleNamespace

    from nagare.app.gui import canvas as canvas_mod

    class Shared(_Upload):
        def __init__(self, handle, shape, image=None):
            super().__init__(handle, shape, fail_init=shared_init_fails, fail_upload=shared_upload_fails)
            self.image = image

    class Mapped(_Upload):
        def __init__(self, handle, shape):
            super().__init__(handle, shape, fail_upload=mapped_fails)

    monkeypatch.setattr(canvas_mod, "SharedTexture", Shared)
    monkeypatch.setattr(interop, "TextureInterop", Mapped)
    monkeypatch.setattr(interop, "_logged", set())
    c = SimpleNamespace(_interop=None, shared_uploads=True, buffer_sampling=True, image="the field image",
                        _gl_texture_handle=lambda: 7)
    c._new_interop = lambda shape: canvas_mod.FieldCanvas._new_interop(c, shape)

    def drop():
        if c._interop is not None:
            c._interop.close()
            c._interop = None
    c._drop_interop = drop
    c.upload = lambda pk, shape: canvas_mod.FieldCanvas._upload_interop(c, pk.data, pk.event, shape)
    return c, Shared, Mapped


def _pk(i, shape=(4, 4)):
    from types import SimpleNamespace

    return SimpleNamespace(data=np.full(shape, i, np.float32), event=None)


def _values(uploads):
    return [float(u[0, 0]) for u in uploads]


def test_grids_go_through_shared_buffers_when_they_can(monkeypatch, caplog):
    c, Shared, Mapped = _fake_canvas(monkeypatch)
    for i in range(3):
        c.upload(_pk(i), (4, 4))
    assert type(c._interop) is Shared and _values(c._interop.uploads) == [0, 1, 2]
    assert c.shared_uploads and "shared display buffers" not in caplog.text


def test_no_shared_buffers_falls_back_to_mapping_and_says_so_once(monkeypatch, caplog):
    c, Shared, Mapped = _fake_canvas(monkeypatch, shared_init_fails=True)
    with caplog.at_level(logging.INFO, logger="nagare"):
        c.upload(_pk(0), (4, 4))
        c._drop_interop()  # a new shape: the choice is not tried again
        c.upload(_pk(1, (8, 8)), (8, 8))
    assert type(c._interop) is Mapped and _values(c._interop.uploads) == [1] and not c.shared_uploads
    assert caplog.text.count("no shared display buffers") == 1 and "GL_EXT_memory_object_fd" in caplog.text


def test_a_failing_shared_upload_is_redone_by_mapping_and_nothing_is_lost(monkeypatch, caplog):
    c, Shared, Mapped = _fake_canvas(monkeypatch, shared_upload_fails=True)
    with caplog.at_level(logging.INFO, logger="nagare"):
        c.upload(_pk(0), (4, 4))
        c.upload(_pk(1), (4, 4))
    shared = [u for u in _Upload.made if type(u) is Shared][-1]
    assert shared.closed, "the failed shared buffers are released"
    assert type(c._interop) is Mapped and _values(c._interop.uploads) == [0, 1]
    assert caplog.text.count("shared display buffers failed") == 1


def test_a_failing_mapped_upload_is_not_swallowed(monkeypatch):
    c, Shared, Mapped = _fake_canvas(monkeypatch, shared_init_fails=True, mapped_fails=True)
    with pytest.raises(RuntimeError, match="GL_INVALID_OPERATION"):
        c.upload(_pk(0), (4, 4))


def test_a_field_that_does_not_fit_the_texture_is_refused_without_dropping_shared_buffers(monkeypatch):
    c, Shared, Mapped = _fake_canvas(monkeypatch)
    c.upload(_pk(0), (4, 4))
    with pytest.raises(ValueError, match="does not match the texture"):
        c.upload(_pk(1, (5, 4)), (4, 4))  # a data error, not a failure of the buffers
    assert c.shared_uploads and type(c._interop) is Shared and _values(c._interop.uploads) == [0]


class _CountingEvent:
    """Done after ``after`` queries of .done."""

    def __init__(self, after):
        self.after, self.queries = after, 0

    @property
    def done(self):
        self.queries += 1
        return self.queries > self.after


def test_poll_until_done_polls_and_a_stop_request_ends_the_wait():
    import threading

    ev = _CountingEvent(3)
    assert interop.poll_until_done(ev, 1e-4) and ev.queries == 4
    stop = threading.Event()
    stop.set()
    never = _CountingEvent(10**9)
    assert not interop.poll_until_done(never, 1e-4, stop=stop) and never.queries == 1


def test_shared_buffers_drawn_directly_fence_each_buffer_before_cuda_writes_it_again(monkeypatch):
    """Image mode (the field image samples the buffer): GL's reads of a buffer are its draws, so the
    shown buffer's fence is set when the next upload turns to the other one, and every CUDA copy
    into a buffer waits for that buffer's fence first; close() fences the shown one too."""
    from types import SimpleNamespace

    from nagare.app.gui import shared_texture as st

    log, fences = [], []

    def fence(*a):
        fences.append(f"fence{len(fences) + 1}")
        log.append("fence")
        return fences[-1]

    monkeypatch.setattr("OpenGL.GL.glFenceSync", fence)
    monkeypatch.setattr(st, "poll_until_done", lambda ev, poll_s, **k: True)
    monkeypatch.setattr(st, "_check", lambda r, what: log.append(what))

    class Slot:
        def __init__(self, name):
            self.name, self.fence, self.buffer = name, None, {"A": 11, "B": 12}[name]
            self.alloc = SimpleNamespace(address=0)

        def wait_gl_done(self, poll_s):
            log.append(f"wait {self.name} ({self.fence})")
            self.fence = None

        def close(self):
            log.append(f"close {self.name}")

    rt = SimpleNamespace(cudaMemcpy2DAsync=lambda *a: None, cudaStreamWaitEvent=lambda *a: None,
                         cudaMemcpyKind=SimpleNamespace(cudaMemcpyDeviceToDevice=3),
                         cudaStreamSynchronize=lambda s: None, cudaStreamDestroy=lambda s: None)
    shown = []
    image = SimpleNamespace(sample_buffer=lambda buf, shape=None: shown.append(buf) or log.append(f"draw {buf}"))
    tex = st.SharedTexture.__new__(st.SharedTexture)
    tex.rt, tex.shape, tex.pitch, tex.image, tex._shown, tex._next = rt, (4, 6), 24, image, None, 0
    tex._slots, tex.stream, tex.copies, tex.skip = [Slot("A"), Slot("B")], "stream", 0, frozenset()
    tex._record_event = lambda: None
    array = SimpleNamespace(shape=(4, 6), dtype=np.float32, strides=(24, 4), data=SimpleNamespace(ptr=1))
    for _ in range(3):  # A, B, A
        tex.upload(array, event=SimpleNamespace(ptr=2))
    assert shown == [11, 12, 11]
    copies = [i for i, e in enumerate(log) if e == "cudaMemcpy2DAsync"]
    # before each copy: the other buffer's fence set (from the 2nd upload on), then this one's waited for
    assert log[copies[0] - 2] == "wait A (None)"
    assert log[copies[1] - 3:copies[1] - 1] == ["fence", "wait B (None)"]
    assert log[copies[2] - 3:copies[2] - 1] == ["fence", "wait A (fence1)"]  # A's fence, set at the 2nd upload
    log.clear()
    tex.close()  # back to the texture, then the shown buffer (A) fenced; both waited for before freeing
    assert log[:2] == ["draw None", "fence"] and "wait A (fence3)" in log and "wait B (fence2)" in log


def test_a_fence_is_asked_without_a_flush_first_and_flushed_once_only_when_unsignalled(monkeypatch):
    """A fence sent with the frame after it is normally signalled: asking with the flush bit would
    send the GL commands queued since as work of their own (one more GPU context switch a frame)."""
    from nagare.app.gui import shared_texture as st

    calls = []
    answers = iter([st.GL_TIMEOUT_EXPIRED, st.GL_TIMEOUT_EXPIRED, st.GL_TIMEOUT_EXPIRED, 0x911A])

    def wait(fence, flags, timeout):
        calls.append(flags)
        return next(answers)

    monkeypatch.setattr("OpenGL.GL.glClientWaitSync", wait)
    st.wait_fence("f", 0.0, "a test")
    assert calls == [0, st.GL_SYNC_FLUSH_COMMANDS_BIT, 0, 0]
    calls.clear()
    monkeypatch.setattr("OpenGL.GL.glClientWaitSync", lambda f, flags, t: calls.append(flags) or 0x911A)
    st.wait_fence("f", 0.0, "a test")  # already signalled: no flush at all
    assert calls == [0]
    monkeypatch.setattr("OpenGL.GL.glClientWaitSync", lambda f, flags, t: st.GL_WAIT_FAILED)
    with pytest.raises(RuntimeError, match="glClientWaitSync failed on a test"):
        st.wait_fence("f", 0.0, "a test")


def test_a_shared_vertex_buffer_is_written_after_the_last_frame_and_drawn_after_its_copy(monkeypatch):
    """Each write waits for the fence set after the last drawn frame, then copies and waits for the
    copy before GL draws; the frame fence is set only once a buffer was written, each new one
    replacing the old; close() gives VisPy its own buffer back before the shared memory goes."""
    from types import SimpleNamespace

    from nagare.app.gui import shared_vertices as sv

    log = []
    monkeypatch.setattr(sv, "wait_fence", lambda fence, poll_s, what: log.append(f"wait {fence}"))
    monkeypatch.setattr(sv, "poll_until_done", lambda ev, poll_s, **k: log.append("copy done") or True)
    monkeypatch.setattr(sv, "_check", lambda r, what: log.append(what))
    made = iter(["fence1", "fence2"])
    monkeypatch.setattr("OpenGL.GL.glFenceSync", lambda *a: next(made))
    monkeypatch.setattr("OpenGL.GL.glDeleteSync", lambda f: log.append(f"delete {f}"))
    monkeypatch.setattr("OpenGL.GL.glFinish", lambda: log.append("finish"))

    frame = sv.FrameFence()
    frame.mark()  # nothing written yet: no GL call
    assert frame.fence is None and log == []
    prog = SimpleNamespace(_attributes={"a_position": (5, 0, None, (), None)})
    obj = SimpleNamespace(_handle=5)
    buf = sv.SharedVertexBuffer.__new__(sv.SharedVertexBuffer)
    buf.rt = SimpleNamespace(cudaStreamWaitEvent=lambda *a: None, cudaMemcpyAsync=lambda *a: None,
                             cudaMemcpyKind=SimpleNamespace(cudaMemcpyDeviceToDevice=3),
                             cudaStreamSynchronize=lambda s: log.append("stream sync"),
                             cudaStreamDestroy=lambda s: None)
    buf.nbytes, buf.fence, buf.stream, buf.copies = 32, frame, "stream", 0
    buf.parser, buf.glir_object = SimpleNamespace(_objects={1: prog, 2: obj}), obj
    buf.shared = SimpleNamespace(alloc=SimpleNamespace(address=0), close=lambda: log.append("free"))
    buf._record_event = lambda: None
    buf.original, buf.buffer = 5, 9
    obj._handle = 9
    sv.repoint_attributes(buf.parser, 5, 9)
    array = SimpleNamespace(nbytes=32, flags=SimpleNamespace(c_contiguous=True), data=SimpleNamespace(ptr=1))
    buf.upload(array, SimpleNamespace(ptr=2))  # the first write: no frame drawn yet, nothing to wait for
    assert log == ["cudaStreamWaitEvent", "cudaMemcpyAsync", "copy done"] and frame.armed
    frame.mark()
    log.clear()
    buf.upload(array, SimpleNamespace(ptr=2))
    assert log == ["wait fence1", "cudaStreamWaitEvent", "cudaMemcpyAsync", "copy done"]
    frame.mark()  # the newer fence replaces the older one
    assert log[-1] == "delete fence1" and frame.fence == "fence2"
    log.clear()
    buf.close()
    assert obj._handle == 5 and prog._attributes["a_position"][0] == 5
    assert log == ["stream sync", "finish", "free"] and buf.buffer is None

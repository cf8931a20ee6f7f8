"""Geometry drawn from the device (app/gui/device_draw.py) and the display's host-byte counter,
without a GPU: the xp geometry run on NumPy against the host path's functions, the counter with
a fake device array, and the 3D grid view's device path on Mesa (NumPy in place of CuPy, a fake
buffer registration that writes the GL buffer from the host) against the host path's pixels."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import gl_buffer_rows, isolated


class FakeDeviceArray:
    """Stands for a CuPy array: host() must copy it with .get(stream=…) and count the bytes."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.shape, self.ndim, self.dtype, self.nbytes = self.a.shape, self.a.ndim, self.a.dtype, self.a.nbytes
        self.gets = 0

    def get(self, stream=None):
        self.gets += 1
        return self.a.copy()


@pytest.fixture
def no_cupy_stream(monkeypatch):
    from nagare.app.gui import drawer

    monkeypatch.setattr(drawer, "copy_stream", lambda: None)


def _ring(seed=0, n_t=6, n=5):
    rng = np.random.default_rng(seed)
    t = (rng.random((n_t, n, 3)) * 10).astype(np.float32)
    t[2] = np.nan  # the ring's gap: slot 3 is the oldest
    t[4, 1] = np.nan  # a sample not written
    t[0, 3, 2] = np.inf
    t[5, 2] = t[4, 2] + np.float32([9, 0, 0])  # a jump across a periodic box
    return t


# ---- geometry on NumPy -------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_step", [None, 4.0, (4.0, 20.0, 20.0)])
@pytest.mark.parametrize("rotate", [False, True])
def test_trail_lines_are_the_host_segments_with_the_left_out_ones_hidden(max_step, rotate):
    from nagare.app.gui.device_draw import trail_lines
    from nagare.app.gui.view3d import trail_colours, trail_points

    t = _ring()
    if rotate:
        t = t[[3, 4, 5, 0, 1]]  # no gap slot: taken in the order given
    pts, counts = trail_points(t, max_step)
    ends, rgba = trail_lines(np, t, max_step)
    n_t, n = t.shape[:2]
    assert ends.shape == (2 * (n_t - 1) * n, 3) and rgba.shape == (2 * (n_t - 1) * n, 4)
    shown = rgba[:, 3] > 0
    np.testing.assert_array_equal(ends[shown], pts)
    np.testing.assert_allclose(rgba[shown], trail_colours(counts))
    assert np.isfinite(ends).all()  # hidden ends sit at the origin, never NaN
    # a segment is hidden as a whole (both ends)
    np.testing.assert_array_equal(shown[0::2], shown[1::2])


def test_trail_lines_of_an_empty_ring():
    from nagare.app.gui.device_draw import trail_lines

    ends, rgba = trail_lines(np, np.zeros((4, 0, 3), np.float32))
    assert ends.shape == (0, 3) and rgba.shape == (0, 4)


def test_leaf_lines_are_box_segments_in_level_colours():
    from nagare.app.fieldkinds.boxes import box_segments
    from nagare.app.gui.device_draw import leaf_lines
    from nagare.app.gui.view3d import level_colours

    rng = np.random.default_rng(1)
    lo = rng.random((5, 3)).astype(np.float32)
    hi = lo + 0.5
    level = np.array([0, 1, 2, 3, 9])
    pts, rgba = leaf_lines(np, lo, hi, level)
    np.testing.assert_array_equal(pts, box_segments(lo, hi))
    np.testing.assert_array_equal(rgba, np.repeat(level_colours(level), 24, axis=0))
    _, rgba0 = leaf_lines(np, lo, hi, None)
    np.testing.assert_array_equal(rgba0, np.repeat(level_colours(np.zeros(5, int)), 24, axis=0))


def test_point_positions_hide_non_finite_rows_and_pad_rows_fills_the_capacity():
    from nagare.app.gui.device_draw import HIDDEN, pad_rows, point_positions

    p = point_positions(np, np.array([[1, 2, 3], [np.nan, 1, 1], [4, 5, np.inf]], np.float32))
    np.testing.assert_array_equal(p, [[1, 2, 3], [HIDDEN, 0, 0], [HIDDEN, 0, 0]])
    np.testing.assert_array_equal(point_positions(np, np.array([[1, 2]], np.float32), 3), [[1, 2, 0]])
    padded = pad_rows(np, p[:1], 3, (HIDDEN, 0, 0))
    np.testing.assert_array_equal(padded, [[1, 2, 3], [HIDDEN, 0, 0], [HIDDEN, 0, 0]])
    assert pad_rows(np, p, 3, (0, 0, 0)) is not None and pad_rows(np, p, 3, (0, 0, 0)).shape == (3, 3)


# ---- the counter ---------------------------------------------------------------------------------------------
def test_host_counts_the_bytes_of_device_copies_only(no_cupy_stream):
    from nagare.app.gui.drawer import HostBytes, counting_host_bytes, host

    dev = FakeDeviceArray(np.ones((10, 3), np.float32))
    counter = HostBytes()
    host(dev, "cupy")  # outside a counting block: copied, not counted here
    with counting_host_bytes(counter):
        out = host(dev, "cupy", "tracers")
        host(np.ones(100), "cupy", "numpy array")  # already on the host: no copy
        host(np.float32(2.0), "cupy", "numpy scalar")
        host(FakeDeviceArray(np.float32(3.0)), "cupy", "colour range")
        host(None, "cupy")
    np.testing.assert_array_equal(out, dev.a)
    assert counter.total == 120 + 4 and counter.copies == 2
    assert counter.by == {"tracers": 120, "colour range": 4}
    assert dev.gets == 2


def test_the_canvas_counts_every_host_byte_of_a_frame(make_canvas, no_cupy_stream):
    """A CuPy-like packet on the host path (Mesa): the field, the tracers over it and the colour
    range are each copied once a frame, and the canvas' counter says how many bytes."""
    if not isolated(__file__, "test_the_canvas_counts_every_host_byte_of_a_frame"):
        return
    from nagare.app.packets import FramePacket

    c = make_canvas(200, 160, colorbar=False)
    c.set_backend("cupy")
    field = np.random.default_rng(2).random((16, 20)).astype(np.float32)
    tracers = np.array([[2.0, 3.0], [5.0, 6.0]], np.float32)

    def packet(seq):
        return FramePacket(seq=seq, step=seq, time=FakeDeviceArray(np.float64(seq)), field_name="f", kind="grid2d",
                           fields=("f",), backend="cupy", data=FakeDeviceArray(field),
                           overlay=FakeDeviceArray(tracers), vmin=FakeDeviceArray(np.float32(0)),
                           vmax=FakeDeviceArray(np.float32(1)))

    per_frame = field.nbytes + tracers.nbytes + 2 * 4
    for seq in (1, 2, 3):
        before = c.host_bytes.total
        c.show_packet(packet(seq))
        c.draw_now(finish=True)
        assert c.host_bytes.total - before == per_frame
    assert c.host_bytes.by == {"field": 3 * field.nbytes, "tracers": 3 * tracers.nbytes, "colour range": 24}
    before = c.host_bytes.total
    assert c.shown_time() == "t = 3"  # the time label's read counts too
    assert c.host_bytes.total - before == 8


def test_worker_scalars_become_host_values_with_the_packet():
    """On the GPU the worker copies the colour range and time into pinned memory with the snapshot;
    a packet without device scalars is left as it is."""
    from nagare.app.gui.worker import scalars_to_host
    from nagare.app.packets import FramePacket

    pk = FramePacket(seq=1, step=1, time=0.5, field_name="f", kind="grid2d", vmin=np.float32(0), vmax=None)
    scalars_to_host(None, pk, None)  # nothing on the device: no CuPy needed
    assert pk.time == 0.5 and pk.vmin == 0 and pk.device_scalars is None


def test_worker_copies_the_scalars_on_the_engine_stream(monkeypatch):
    """The pinned copy of the colour range and time goes on the stream the packet's event is
    recorded on (the engine's), not on whichever stream is current; the values it stacks are made
    on that stream too. A fake CuPy: the copy is a memmove, the streams record their use."""
    import ctypes
    import sys
    import types

    from nagare.app.gui.worker import scalars_to_host
    from nagare.app.packets import FramePacket

    used = []

    class Stream:
        def __init__(self, ptr):
            self.ptr = ptr

        def __enter__(self):
            used.append(("stack on", self.ptr))

        def __exit__(self, *exc):
            return False

    class DeviceStack:
        def __init__(self, a):
            self.a, self.nbytes = a, a.nbytes
            self.data = types.SimpleNamespace(ptr=a.ctypes.data)

    def memcpy_async(dst, src, nbytes, kind, stream_ptr):
        used.append(("copy on", stream_ptr))
        ctypes.memmove(dst, src, nbytes)

    runtime = types.SimpleNamespace(memcpyAsync=memcpy_async, memcpyDeviceToHost=2)
    xp = types.SimpleNamespace(float64=np.float64, stack=lambda arrays: DeviceStack(np.stack(arrays)),
                               asarray=lambda a, dtype: np.asarray(a.a, dtype),
                               cuda=types.SimpleNamespace(runtime=runtime, get_current_stream=lambda: Stream(7)))
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=np.empty))
    pk = FramePacket(seq=1, step=1, time=FakeDeviceArray(np.float64(2.5)), field_name="f", kind="grid2d",
                     vmin=FakeDeviceArray(np.float32(-1)), vmax=FakeDeviceArray(np.float32(3)))
    scalars_to_host(xp, pk, Stream(1234))
    assert used == [("stack on", 1234), ("copy on", 1234)]
    assert (float(pk.vmin), float(pk.vmax), float(pk.time)) == (-1.0, 3.0, 2.5)


# ---- the 3D grid view's device path on Mesa ---------------------------------------------------------------------
class FakeBufferInterop:
    """Registers nothing: an upload writes the GL buffer from the host, as CUDA would from the device.
    As cudaGraphicsGLRegisterBuffer, it takes the GL buffer as it is now: one that still has another
    size than the bytes it will be written with is refused here (the registration would be at the
    old size)."""

    made = []

    def __init__(self, vbo, handle, nbytes):
        from vispy.gloo import gl

        gl.glBindBuffer(gl.GL_ARRAY_BUFFER, handle)
        size = gl.glGetBufferParameter(gl.GL_ARRAY_BUFFER, gl.GL_BUFFER_SIZE)
        gl.glBindBuffer(gl.GL_ARRAY_BUFFER, 0)
        assert size == nbytes, f"GL buffer {handle} has {size} bytes, registered for {nbytes}"
        self.vbo, self.nbytes, self.closed = vbo, nbytes, False
        FakeBufferInterop.made.append(self)

    def upload(self, array, event=None):
        assert array.nbytes == self.nbytes and array.flags.c_contiguous
        self.vbo.set_data(np.asarray(array))

    def close(self):
        self.closed = True


def failing_registration(fail_at: int):
    """A make_interop whose ``fail_at``-th registration (from 1) raises, as a failing
    cudaGraphicsGLRegisterBuffer would; ``.made`` holds the ones made."""
    made = []

    def make(vbo, handle, nbytes):
        if len(made) + 1 == fail_at:
            raise RuntimeError("cudaErrorUnknown: a fake registration failing")
        made.append(FakeBufferInterop(vbo, handle, nbytes))
        return made[-1]

    make.made = made
    return make


class FakeVolumeInterop:
    def __init__(self, planes):
        self.planes = planes

    def upload(self, data, event=None):
        self.planes.set_volume(data)


def _device_drawer(canvas):
    from nagare.app.gui.device_draw import HostGeometry
    from nagare.app.gui.view3d import VolumeDrawer

    d = canvas.own_drawer(VolumeDrawer)
    d.device.geometry = HostGeometry()
    d.device.make_interop = FakeBufferInterop
    d._interop = lambda name, texture, canvas, shape: FakeVolumeInterop(d.planes)
    return d


def _volume_packet(seq, overlay, trails, boxes, levels=None):
    from nagare.app.packets import FramePacket

    vol = np.zeros((6, 8, 10), np.float32)
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="volume3d", fields=("f",),
                       data=vol, vmin=np.float32(0), vmax=np.float32(1), spacing=0.5, slice_count=6,
                       overlay=overlay, trails=trails, boxes=boxes, boxes_levels=levels)


def test_the_device_path_draws_what_the_host_path_draws(make_canvas):
    """Leaves and trails from the device buffers land on the pixels of the host path's lines;
    the leaves are rebuilt only for another boxes tuple; a buffer is registered again only when
    the count grows."""
    if not isolated(__file__, "test_the_device_path_draws_what_the_host_path_draws"):
        return
    lo = np.array([[0, 0, 0], [2.5, 0, 0]], np.float32)
    hi = np.array([[2.5, 4, 3], [5, 2, 1.5]], np.float32)
    boxes = (lo, hi, np.array([0, 1]))
    rng = np.random.default_rng(3)
    trails = (np.array([1.0, 1.0, 1.0], np.float32) + np.cumsum(rng.random((5, 4, 3)), axis=0) * 0.6).astype(np.float32)
    tracers = trails[-1].copy()
    tracers[2] = np.nan  # parked

    frames = {}
    for path in ("host", "interop"):
        c = make_canvas(320, 260, colorbar=False)
        c.set_view3d(planes={a: [False, 0.5] for a in "xyz"}, outline=False)
        c.display_path = path
        d = _device_drawer(c) if path == "interop" else None
        c.show_packet(_volume_packet(1, None, None, boxes, (0, 1)))
        c.draw_now(finish=True)
        frames[path, "leaves"] = c.grab()
        assert c.legend_levels == [0, 1]
        c.show_packet(_volume_packet(2, tracers, trails, boxes, (0, 1)))
        c.draw_now(finish=True)
        frames[path, "all"] = c.grab()
        if d is not None:
            assert d.leaf_uploads == 1  # the same boxes tuple: not built again
            assert d.dev_leaves.visible and d.dev_trails.visible and d.dev_tracers.visible
            assert not (d.leaves.visible or d.tracer_trails.visible or d.tracers.visible)
            assert d.device.buffers["tracers"].capacity == 4
            # what GL holds is the host path's geometry (the read-back the GPU test makes of CUDA's writes)
            from nagare.app.fieldkinds.boxes import box_segments
            from nagare.app.gui.device_draw import HIDDEN

            np.testing.assert_array_equal(gl_buffer_rows(c, d.dev_leaves.positions, 48, 3), box_segments(lo, hi))
            shown = np.where(np.isfinite(tracers).all(axis=1)[:, None], tracers, np.float32([HIDDEN, 0, 0]))
            np.testing.assert_array_equal(gl_buffer_rows(c, d.dev_tracers.positions, 4, 3), shown)
            c.show_packet(_volume_packet(3, tracers[:2], trails[:, :2], (lo[:1], hi[:1], np.array([1])), None))
            c.draw_now(finish=True)
            assert d.leaf_uploads == 2 and c.legend_levels == [1]  # another tuple: rebuilt, levels read
            assert d.device.buffers["tracers"].capacity == 4 and d.device.buffers["tracers"].registrations == 1
            c.show_packet(_volume_packet(4, np.concatenate([tracers] * 3), np.concatenate([trails] * 3, axis=1),
                                         boxes, (0, 1)))
            c.draw_now(finish=True)
            assert d.device.buffers["tracers"].capacity >= 12 and d.device.buffers["tracers"].registrations == 2
            assert d.device.buffers["trail ends"].capacity == 2 * 4 * 12
            c.show_packet(_volume_packet(5, tracers[:2], trails[:, :2], boxes, (0, 1)))
            c.draw_now(finish=True)  # far fewer than the capacity: the buffers shrink to the count
            assert d.device.buffers["tracers"].capacity == 2 and d.device.buffers["tracers"].registrations == 3
            assert d.device.buffers["trail ends"].capacity == d.device.buffers["trail colours"].capacity == 2 * 4 * 2
            c.close()  # the GL context goes: every registration is released before
            assert FakeBufferInterop.made and all(m.closed for m in FakeBufferInterop.made)
    lit = {k: (np.abs(f.astype(int) - f[2, 2].astype(int)).max(axis=-1) > 30).sum() for k, f in frames.items()}
    assert lit["interop", "all"] > lit["interop", "leaves"] + 20  # the trails and tracers are drawn
    for what in ("leaves", "all"):
        a, b = frames["host", what].astype(int), frames["interop", what].astype(int)
        lit_a = np.abs(a - a[2, 2]).max(axis=-1) > 30
        lit_b = np.abs(b - b[2, 2]).max(axis=-1) > 30
        assert lit_a.sum() > 100
        # the same lines (the tracer sprites differ a little: VisPy's Markers antialias their edge)
        assert (lit_a ^ lit_b).sum() <= 0.1 * lit_a.sum(), (what, lit_a.sum(), lit_b.sum(), (lit_a ^ lit_b).sum())
    d_leaves = np.abs(frames["host", "leaves"].astype(int) - frames["interop", "leaves"].astype(int)).max(axis=-1)
    assert (d_leaves > 8).sum() <= 0.02 * lit_a.sum()  # leaves alone: the same pixels in the same colours


def test_2d_tracers_and_particles_from_the_device_draw_the_host_pixels(make_canvas):
    """The tracers over a 2D grid and 2D particles through their device buffers (NumPy standing for
    CuPy, the fake registration) give the host path's frame; a parked tracer is not drawn."""
    if not isolated(__file__, "test_2d_tracers_and_particles_from_the_device_draw_the_host_pixels"):
        return
    from nagare.app.gui.device_draw import HostGeometry
    from nagare.app.packets import FramePacket

    rng = np.random.default_rng(4)
    field = rng.random((24, 32)).astype(np.float32)
    tracers = np.array([[4.0, 5.0], [20.0, 12.0], [np.nan, np.nan], [28.0, 20.0]], np.float32)
    positions = rng.random((40, 2)).astype(np.float32)
    values = rng.random(40).astype(np.float32)
    frames = {}
    for path in ("host", "interop"):
        c = make_canvas(256, 192, colorbar=False, axes=False)
        backend = "numpy"
        if path == "interop":
            backend = "cupy"  # the arrays are NumPy: the device path runs on them (HostGeometry)
            c.display_path = "interop"
            c.device_geometry.geometry = HostGeometry()
            c.device_geometry.make_interop = FakeBufferInterop
            c._upload_interop = lambda data, event, shape, c=c: c.image.set_data(data)  # the field as the host does
        for seq in (1, 2):  # the second grid frame takes the interop branch for the field too
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                      backend=backend, data=field, overlay=tracers, vmin=0.0, vmax=1.0))
            c.draw_now(finish=True)
        frames[path, "grid"] = c.grab()
        c.show_packet(FramePacket(seq=3, step=3, time=0.0, field_name="p", kind="particles", fields=("p",),
                                  backend=backend, positions=positions, data=values, vmin=0.0, vmax=1.0,
                                  bounds=((0.0, 0.0), (1.0, 1.0))))
        c.draw_now(finish=True)
        frames[path, "particles"] = c.grab()
        if path == "interop":
            assert set(c.device_geometry.buffers) == {"tracers", "particles", "particle values"}
            assert c.device_geometry.buffers["tracers"].capacity == 4
    for what in ("grid", "particles"):
        a, b = frames["host", what].astype(int), frames["interop", what].astype(int)
        assert np.abs(a - b).max() <= 2, (what, np.abs(a - b).max(), (np.abs(a - b).max(axis=-1) > 2).sum())
    p = frames["interop", "particles"].reshape(-1, 3).astype(int)
    background = np.median(p, axis=0)
    assert (np.abs(p - background).max(axis=-1) > 30).sum() > 200  # the sprites are drawn
    g = frames["interop", "grid"].astype(int)
    assert (g.max(axis=-1) > 235).sum() > 8 and (g.max(axis=-1) < 25).sum() > 8  # white cores, dark rings


def test_boxes_from_the_device_draw_the_host_pixels_and_are_built_once_per_set(make_canvas):
    """The ``boxes`` kind (amr3d's leaves as the shown field) through device buffers: the host
    path's lines and legend; the same arrays again are not built again."""
    if not isolated(__file__, "test_boxes_from_the_device_draw_the_host_pixels_and_are_built_once_per_set"):
        return
    from nagare.app.gui.device_draw import HostGeometry
    from nagare.app.packets import FramePacket

    lo = np.array([[0, 0, 0], [1, 0, 0], [1, 0.5, 0], [1.5, 0.5, 0]], np.float32)
    hi = lo + np.array([[1, 1, 1], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]], np.float32)
    level = np.array([0, 1, 1, 2])
    frames = {}
    for path in ("host", "interop"):
        c = make_canvas(320, 240, colorbar=False, axes=False)
        backend = "numpy"
        if path == "interop":
            backend = "cupy"
            c.display_path = "interop"
            c.device_geometry.geometry = HostGeometry()
            c.device_geometry.make_interop = FakeBufferInterop
        for seq in (1, 2):
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="b", kind="boxes", fields=("b",),
                                      backend=backend, lo=lo, hi=hi, level=level,
                                      boxes_levels=(0, 1, 2) if path == "interop" else None))
            c.draw_now(finish=True)
        frames[path] = c.grab()
        assert c.legend_levels == [0, 1, 2]
        if path == "interop":
            assert c.lines_device.visible and not c.lines.visible
            assert c.device_geometry.uploads == 1  # the same lo array: built once
    a, b = frames["host"].astype(int), frames["interop"].astype(int)
    lit = np.abs(a - a[2, 2]).max(axis=-1) > 30
    assert lit.sum() > 100
    assert (np.abs(a - b).max(axis=-1) > 8).sum() <= 0.02 * lit.sum()


def test_a_failed_registration_during_growth_falls_back_to_the_host_geometry(make_canvas, caplog):
    """The leaves' colour buffer fails to register while both leaf buffers grow: both are discarded
    (none left registered at another size), the failure is logged once, the frame is drawn, and
    this drawer draws the leaves, tracers and trails from host copies from then on — the host
    path's pixels."""
    if not isolated(__file__, "test_a_failed_registration_during_growth_falls_back_to_the_host_geometry"):
        return
    rng = np.random.default_rng(5)
    lo = (rng.random((6, 3)) * np.float32([3, 2, 1.5])).astype(np.float32)
    boxes_small = (lo[:2], lo[:2] + 1.0, np.array([0, 1]))
    boxes = (lo, lo + np.float32(1.5), np.array([0, 1, 2, 1, 0, 2]))
    trails = (np.array([1.0, 1.0, 1.0], np.float32) + np.cumsum(rng.random((5, 4, 3)), axis=0) * 0.6).astype(np.float32)
    packets = [_volume_packet(1, None, None, boxes_small, (0, 1)), _volume_packet(2, None, None, boxes, (0, 1, 2)),
               _volume_packet(3, trails[-1].copy(), trails, boxes, (0, 1, 2))]
    frames = {}
    for path in ("host", "interop"):
        c = make_canvas(320, 260, colorbar=False)
        c.set_view3d(planes={a: [False, 0.5] for a in "xyz"}, outline=False)
        c.display_path = path
        d = None
        if path == "interop":
            d = _device_drawer(c)
            d.device.make_interop = make = failing_registration(4)  # leaf ends, colours; ends again, colours again ✗
        for pk in packets:
            caplog.clear()
            c.show_packet(pk)
            c.draw_now(finish=True)
            assert "cannot draw frame" not in caplog.text, caplog.text
            assert c.shown is pk
            frames[path, pk.seq] = c.grab()
            if d is not None and pk.seq == 1:
                assert d.dev_leaves.visible and d.leaf_uploads == 1
            if d is not None and pk.seq == 2:
                assert "drawing geometry from the device failed" in caplog.text
                assert d.device.failed and not d.device.buffers
                assert all(m.closed for m in make.made) and len(make.made) == 3
                assert d._leaves_key is None and d.leaf_uploads == 1  # the failed upload is not taken for built
                assert d.leaves.visible and not d.dev_leaves.visible and c.legend_levels == [0, 1, 2]
        if d is not None:
            assert "drawing geometry from the device failed" not in caplog.text  # said once
            assert d.tracers.visible and d.tracer_trails.visible
            assert not (d.dev_tracers.visible or d.dev_trails.visible or d.dev_leaves.visible)
            assert len(make.made) == 3  # nothing registered after the failure
    for seq in (2, 3):
        a, b = frames["host", seq].astype(int), frames["interop", seq].astype(int)
        assert (np.abs(a - a[2, 2]).max(axis=-1) > 30).sum() > 100
        np.testing.assert_array_equal(a, b)


def test_a_failed_2d_device_upload_draws_the_host_geometry(make_canvas, caplog):
    """Boxes whose colour buffer fails to register: drawn from host copies in the same frame (the
    host path's pixels), the canvas' shown packet and legend follow; the particles after them
    come through the host too."""
    if not isolated(__file__, "test_a_failed_2d_device_upload_draws_the_host_geometry"):
        return
    from nagare.app.gui.device_draw import HostGeometry
    from nagare.app.packets import FramePacket

    rng = np.random.default_rng(6)
    positions = rng.random((40, 2)).astype(np.float32)
    values = rng.random(40).astype(np.float32)
    lo = np.array([[0, 0, 0], [1, 0, 0], [1, 0.5, 0]], np.float32)
    hi = lo + np.float32(0.5)
    level = np.array([0, 1, 2])
    frames = {}
    for path in ("host", "interop"):
        c = make_canvas(256, 192, colorbar=False, axes=False)
        backend = "numpy"
        if path == "interop":
            backend = "cupy"
            c.display_path = "interop"
            c.device_geometry.geometry = HostGeometry()
            c.device_geometry.make_interop = failing_registration(2)  # the boxes' colour buffer
        pk = FramePacket(seq=1, step=1, time=0.0, field_name="b", kind="boxes", fields=("b",), backend=backend,
                         lo=lo, hi=hi, level=level, boxes_levels=(0, 1, 2))
        c.show_packet(pk)
        c.draw_now(finish=True)
        assert c.shown is pk and "cannot draw frame" not in caplog.text
        assert c.legend_levels == [0, 1, 2] and c.lines.visible and not c.lines_device.visible
        assert c._boxes_key is None  # the failed upload is not taken for built
        frames[path, "boxes"] = c.grab()
        pk = FramePacket(seq=2, step=2, time=0.0, field_name="p", kind="particles", fields=("p",), backend=backend,
                         positions=positions, data=values, vmin=0.0, vmax=1.0, bounds=((0.0, 0.0), (1.0, 1.0)))
        c.show_packet(pk)
        c.draw_now(finish=True)
        assert c.shown is pk and "cannot draw frame" not in caplog.text
        frames[path, "particles"] = c.grab()
        if path == "interop":
            assert c.device_geometry.failed and not c.device_geometry.buffers
    for what in ("particles", "boxes"):
        a, b = frames["host", what].astype(int), frames["interop", what].astype(int)
        assert np.abs(a - b).max() <= 2, (what, np.abs(a - b).max())


def test_device_tracers_scale_with_the_pixel_scale_as_markers_do(make_canvas, monkeypatch):
    """On a display of two device pixels per logical pixel (QT_SCALE_FACTOR=2 for the test's own
    process) the device tracer sprites grow as VisPy's Markers (the host path) do: about the same
    pixels lit."""
    monkeypatch.setenv("QT_SCALE_FACTOR", "2")
    if not isolated(__file__, "test_device_tracers_scale_with_the_pixel_scale_as_markers_do"):
        return
    tracers = np.array([[1, 1, 1], [3, 2, 1.5], [4, 3, 2], [2, 3, 0.5]], np.float32)
    lit = {}
    for path in ("host", "interop"):
        c = make_canvas(320, 260, colorbar=False)
        assert c.pixel_scale == 2
        c.set_view3d(planes={a: [False, 0.5] for a in "xyz"}, outline=False)
        c.display_path = path
        if path == "interop":
            _device_drawer(c)
        c.show_packet(_volume_packet(1, tracers, None, None))
        c.draw_now(finish=True)
        f = c.render(alpha=False).astype(int)
        lit[path] = (np.abs(f - f[2, 2]).max(axis=-1) > 30).sum()
    assert lit["host"] > 4 * 40, lit
    assert 0.6 < lit["interop"] / lit["host"] < 1.6, lit


def test_repointing_a_buffer_changes_only_the_attributes_bound_to_it():
    """VisPy's programs keep the GL handle an attribute was bound to and bind it before each draw:
    a shared vertex buffer that replaces VisPy's storage must change exactly those (and back)."""
    from types import SimpleNamespace

    from nagare.app.gui.shared_vertices import repoint_attributes

    draw = object()
    prog_a = SimpleNamespace(_attributes={"a_position": (7, 0, draw, (2,), None), "a_size": (0, 1, draw, (), None)})
    prog_b = SimpleNamespace(_attributes={"a_position": (9, 0, draw, (2,), None)})
    parser = SimpleNamespace(_objects={1: prog_a, 2: prog_b, 3: SimpleNamespace(_handle=7)})
    assert repoint_attributes(parser, 7, 42) == 1
    assert prog_a._attributes["a_position"] == (42, 0, draw, (2,), None)
    assert prog_a._attributes["a_size"][0] == 0 and prog_b._attributes["a_position"][0] == 9
    assert repoint_attributes(parser, 42, 7) == 1 and prog_a._attributes["a_position"][0] == 7


def test_vertex_buffers_fall_back_to_mapping_when_shared_memory_fails(monkeypatch, caplog):
    """Where GL cannot import CUDA's memory, a vertex buffer is registered and mapped around each
    copy, said once, and the canvas stops trying shared vertex buffers (only those)."""
    from types import SimpleNamespace

    from nagare.app.gui import device_draw, interop, shared_vertices

    refused = []

    def refuse(*a, **k):
        refused.append(a)
        raise RuntimeError("the GL context lacks GL_EXT_memory_object_fd")

    made = []
    monkeypatch.setattr(shared_vertices, "SharedVertexBuffer", refuse)
    monkeypatch.setattr(interop, "BufferInterop", lambda handle, nbytes: made.append((handle, nbytes)) or "mapped")
    monkeypatch.setattr(interop, "_logged", set(), raising=False)
    canvas = SimpleNamespace(shared_uploads=True, shared_vertex_uploads=True)
    with caplog.at_level("WARNING"):
        assert device_draw.device_buffer(canvas, object(), 5, 64) == "mapped"
    assert made == [(5, 64)] and canvas.shared_vertex_uploads is False
    assert canvas.shared_uploads is True  # the field's shared texture keeps its own path
    assert "no shared vertex buffers" in caplog.text
    assert device_draw.device_buffer(canvas, object(), 6, 32) == "mapped"
    assert len(refused) == 1 and made == [(5, 64), (6, 32)]  # not tried again

"""Geometry drawn from the device: line segments and points whose vertex buffers CUDA writes.

The 3D grid view's tracers, their trails and the octree leaves (and 3D particles' trails, the 2D
view's tracers and particles, boxes shown on their own) reach GL without the host on the interop
path: their vertex arrays are built with ``xp`` (CuPy there; the same functions run on NumPy,
which is how they are tested without a GPU) and copied device → device into GL buffers whose
memory CUDA shares (:mod:`shared_vertices`), or where that is not offered, CUDA-registered GL buffers
mapped around each copy (:class:`interop.BufferInterop`).

The arrays have a size known without reading the device: a trail ring of T samples of n
tracers gives 2·(T−1)·n segment ends whether or not every sample is written. What the host path
leaves out (an unwritten sample, a jump across a periodic domain, a parked tracer) is kept with
alpha 0 (lines) or at :data:`HIDDEN` (points), and the shaders (shaders/glsl/device_*.glsl) move
such vertices out of the clip volume. Reading back how many are valid — what boolean indexing
does — would be a device→host copy and a wait, every frame.

A buffer is sized to a capacity that grows by half again and shrinks only when the count falls
well below it (:class:`DeviceVertices`): it is registered with CUDA once per capacity, and the rows
past the current count are filled with the hidden value.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from nagare.engine.errors import one_line
from vispy import gloo, scene
from vispy.visuals import Visual

from nagare import shaders

from . import interop
from .held_uniforms import HeldUniforms
from .overlay_style import LEVEL_COLOURS, TRACER_RGBA, TRACER_SIZE, TRAIL_ALPHA, TRAIL_RGB

HIDDEN = np.float32(-3e38)  # a point's x that the points shader does not draw
# a buffer more than this many times the rows it holds is allocated again at their count: GPU
# memory comes back after a large count, and a count that wavers does not re-register every frame
SHRINK_BELOW = 4


# ---- geometry (xp-generic) ---------------------------------------------------------------------------
def level_colours(xp, level):
    """(n,) levels → (n, 4) RGBA of view3d.LEVEL_COLOURS (cycled past its end), on ``xp``."""
    table = xp.asarray(LEVEL_COLOURS)
    return table[xp.mod(xp.asarray(level).astype(xp.int64), len(LEVEL_COLOURS))]


def leaf_lines(xp, lo, hi, level):
    """(24n, 3) segment ends of the boxes lo..hi and their (24n, 4) level colours, on ``xp``."""
    from nagare.app.fieldkinds.boxes import box_segments

    pts = box_segments(lo, hi, xp=xp)
    if level is None:
        level = xp.zeros(len(lo), xp.int64)
    return pts, xp.repeat(level_colours(xp, level), 24, axis=0)


def trail_lines(xp, trails, max_step=None):
    """A (T, n, 3) trail ring → (2·(T−1)·n, 3) segment ends and (2·(T−1)·n, 4) RGBA, on ``xp``.

    The segments of :func:`view3d.trail_points` / :func:`view3d.trail_colours` in the same order
    (age by age, oldest first; particle by particle within an age) with the same colours; the
    segments those leave out are here too, with alpha 0 and their ends at the origin. The ring's
    rotation (the first unwritten slot after a written one is the gap, the slot after it the
    oldest) is found on the device: no index comes back to the host."""
    t = xp.asarray(trails, dtype=xp.float32)
    if t.ndim != 3 or t.shape[0] < 2 or t.shape[2] != 3 or t.shape[1] == 0:
        return xp.zeros((0, 3), xp.float32), xp.zeros((0, 4), xp.float32)
    n_t, n = t.shape[:2]
    f3 = xp.isfinite(t)
    finite = f3[..., 0] & f3[..., 1] & f3[..., 2]  # (T, n)
    unused = ~finite.any(axis=1)
    gaps = unused & ~xp.roll(unused, 1)
    first_gap = xp.argmax(gaps.astype(xp.int8))  # the first gap slot, where there is one
    rotate = gaps.any() & (first_gap != n_t - 1)
    order = (xp.where(rotate, first_gap + 1, 0) + xp.arange(n_t)) % n_t
    t, finite = t[order], finite[order]
    ok = finite[:-1] & finite[1:]  # (T-1, n)
    a, b = t[:-1], t[1:]
    if max_step is not None:  # per axis, as Python floats: no host → device copy of a (3,) array
        step = xp.abs(b - a)
        for axis, m in enumerate(np.broadcast_to(np.asarray(max_step, np.float32), 3)):
            ok &= ~(step[..., axis] > float(m))
    ends = xp.stack([a, b], axis=2)  # (T-1, n, 2, 3): segment k·n + p joins samples k, k+1 of p
    ends = xp.where(ok[:, :, None, None], ends, xp.float32(0))
    n_age = n_t - 1
    lo, hi = TRAIL_ALPHA
    age = xp.arange(n_age, dtype=xp.float32)
    alpha = xp.stack([lo + (hi - lo) * age / n_age, lo + (hi - lo) * (age + 1) / n_age], axis=1)  # (T-1, 2)
    rgba = xp.empty((n_age, n, 2, 4), xp.float32)
    for c, v in enumerate(TRAIL_RGB):
        rgba[..., c] = v
    rgba[..., 3] = xp.where(ok[:, :, None], alpha[:, None, :], xp.float32(0))
    return ends.reshape(-1, 3), rgba.reshape(-1, 4)


def point_positions(xp, positions, dims: int = 3):
    """(n, d) positions → (n, ``dims``) float32 for the points shader: a row with a non-finite
    coordinate (a parked tracer) at x = HIDDEN, missing coordinates 0 (2D particles drawn in a
    buffer of 3-component positions)."""
    p = xp.asarray(positions, dtype=xp.float32)
    out = xp.zeros((p.shape[0], dims), xp.float32)
    out[:, :p.shape[1]] = p
    ok = xp.isfinite(out).all(axis=1)
    out = xp.where(ok[:, None], out, xp.float32(0))
    out[:, 0] = xp.where(ok, out[:, 0], HIDDEN)
    return out


def pad_rows(xp, array, rows: int, fill):
    """``array`` with rows appended up to ``rows``, filled with ``fill`` (a buffer's capacity)."""
    n = array.shape[0]
    if n == rows:
        return xp.ascontiguousarray(array)
    out = xp.empty((rows,) + tuple(array.shape[1:]), array.dtype)
    out[:n] = array
    fill = np.broadcast_to(np.asarray(fill, array.dtype), out.shape[1:])
    for col, v in np.ndenumerate(fill):  # scalars: fill kernels, no host → device copy
        out[(slice(n, None), *col)] = v.item()
    return out


# ---- where the geometry is built ------------------------------------------------------------------------
class CupyGeometry:
    """The geometry kernels' stream (non-blocking: never ordered behind the engine's queued steps
    by the legacy default stream), made to wait for a packet's snapshot on the GPU."""

    def __init__(self):
        import cupy  # optional dependency (CuPy): the interop path only

        self.xp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def after(self, event):
        """A context in which xp work runs on this stream, after ``event`` (None: no wait)."""
        if event is not None:
            self.stream.wait_event(event)
        return self.stream

    def record(self):
        ev = self.xp.cuda.Event(block=False, disable_timing=True)
        ev.record(self.stream)
        return ev


class HostGeometry:
    """The same steps with NumPy (tests without a GPU: the device path's logic on Mesa)."""

    xp = np

    class _Done:
        done = True

        def synchronize(self):
            pass

    def after(self, event):
        return nullcontext()

    def record(self):
        return self._Done()


# ---- vertex buffers CUDA writes ---------------------------------------------------------------------
class DeviceVertices:
    """One gloo VertexBuffer of float32 rows (``row`` components) that CUDA writes.

    A count larger than its capacity (rows) allocates the GL buffer again (from the host: the fill,
    host → device) at the count or half again the capacity, whichever is larger, and registers it
    with CUDA once; a smaller one is padded on the device with ``fill`` (a hidden vertex), unless
    the capacity is more than :data:`SHRINK_BELOW` times the count: then the buffer is allocated
    again at the count.
    ``make_interop(vbo, gl handle, nbytes)`` registers it (tests pass a fake)."""

    def __init__(self, vbo: gloo.VertexBuffer, row: int, fill, make_interop=None):
        self.vbo, self.row = vbo, int(row)
        self.fill = np.asarray(fill, np.float32)
        self.capacity = 0
        self.registrations = 0
        self.interop = None
        self._make = make_interop

    def reserve(self, canvas, rows: int) -> int:
        """The capacity for ``rows`` rows, the buffer allocated (and registered) again if it is
        smaller or far larger."""
        rows = max(int(rows), 1)
        if self.interop is not None and rows <= self.capacity <= SHRINK_BELOW * rows:
            return self.capacity
        self.close()
        cap = rows if self.capacity > SHRINK_BELOW * rows else max(rows, self.capacity + self.capacity // 2)
        host = np.empty((cap, self.row), np.float32)
        host[:] = self.fill
        self.vbo.set_data(host)
        # the buffer's commands wait in its queue until a draw uses it: run them now, so the GL
        # buffer exists (with its new size) when CUDA registers it
        canvas.context.glir.associate(self.vbo.glir)
        canvas.context.flush_commands()
        handle = int(canvas.context.shared.parser._objects[self.vbo.id].handle)
        nbytes = cap * self.row * 4
        self.interop = (self._make(self.vbo, handle, nbytes) if self._make is not None
                        else device_buffer(canvas, self.vbo, handle, nbytes))
        self.capacity = cap
        self.registrations += 1
        return cap

    def upload(self, array, event) -> None:
        """A device array of exactly ``capacity`` rows (pad_rows), copied after ``event``."""
        self.interop.upload(array, event)

    def close(self) -> None:
        if self.interop is not None:
            self.interop.close()
            self.interop = None

    def discard(self) -> None:
        """Unregistered and its capacity forgotten: grown again from the rows asked next."""
        self.close()
        self.capacity = 0


def device_buffer(canvas, vbo, handle: int, nbytes: int):
    """The way CUDA writes this vertex buffer: memory GL and CUDA share (no map or unmap a frame,
    shared_vertices.py) until that fails once on this canvas, else the buffer registered and
    mapped around each copy (interop.BufferInterop)."""
    if getattr(canvas, "shared_vertex_uploads", False):
        from .shared_vertices import SharedVertexBuffer

        try:
            return SharedVertexBuffer(vbo, nbytes, canvas)
        except Exception as exc:
            interop.log_once(f"display: no shared vertex buffers ({one_line(exc)}); "
                             f"mapping each vertex buffer around its copy instead")
            # vertex buffers only: the field's shared texture has its own flag and fallback
            canvas.shared_vertex_uploads = False
    return interop.BufferInterop(handle, nbytes)


def reserve_all(canvas, wanted) -> list[int]:
    """``wanted``: [(DeviceVertices, rows), …] — every buffer grown (and registered) before any is
    written, their capacities returned. A visual's buffers must keep one size (VisPy refuses to
    draw attributes of different sizes): where one fails, every one of them is discarded."""
    try:
        return [vert.reserve(canvas, rows) for vert, rows in wanted]
    except Exception:
        for vert, _ in wanted:
            vert.discard()
        raise


class GeometryUploads:
    """A drawer's vertex buffers that CUDA writes, by role, and the packet arrays their kernels
    may still read. ``geometry``: where the vertices are built (None: :class:`CupyGeometry`, made
    on first use; tests give :class:`HostGeometry`); ``make_interop``: how a buffer is registered
    (None: :class:`interop.BufferInterop`)."""

    def __init__(self):
        self.geometry = None
        self.make_interop = None
        self.buffers: dict[str, DeviceVertices] = {}
        self.reads = interop.InFlight()
        self.uploads = 0
        self.failed = False  # an upload failed: the drawer draws this geometry from the host

    def buffer(self, role: str, vbo, row: int, fill) -> DeviceVertices:
        v = self.buffers.get(role)
        if v is None or v.vbo is not vbo:
            if v is not None:
                v.close()
            v = self.buffers[role] = DeviceVertices(vbo, row, fill, self.make_interop)
        return v

    def upload(self, canvas, event, reads, build) -> bool:
        """``build(xp)`` → [(DeviceVertices, array, fill), …], run after ``event`` (the packet's
        snapshot) on the geometry stream; each array padded to its buffer's capacity and copied
        into it device → device. ``reads`` (the packet arrays the kernels read) are held until
        the kernels have run.

        False when this failed (a registration, a map, the build, GPU memory), said once in the
        log: every buffer is unregistered and :attr:`failed` is set, so that the drawer draws
        this geometry through the host from then on (an exception here would stop the frame's
        upload every frame)."""
        if self.failed:
            return False
        try:
            self._upload(canvas, event, reads, build)
        except Exception as exc:
            interop.log_once(f"display: drawing geometry from the device failed ({one_line(exc)}); "
                             f"drawing it from host copies instead")
            self.failed = True
            self.close()
            return False
        return True

    def _upload(self, canvas, event, reads, build) -> None:
        if self.geometry is None:
            self.geometry = CupyGeometry()
        geo = self.geometry
        with geo.after(event):
            parts = build(geo.xp)
            capacities = reserve_all(canvas, [(vert, array.shape[0]) for vert, array, _ in parts])
            arrays = [pad_rows(geo.xp, array, cap, fill) for (_, array, fill), cap in zip(parts, capacities)]
            done = geo.record()
        self.reads.release_done()
        self.reads.hold(reads, done)  # the host moves on before the kernels have run
        for (vert, _, _), array in zip(parts, arrays):
            vert.upload(array, done)
        self.uploads += 1

    def drop(self, *roles: str) -> None:
        """Unregister these roles' buffers (the host is about to write them)."""
        for role in roles:
            v = self.buffers.pop(role, None)
            if v is not None:
                self.reads.wait_all()
                v.close()

    def close(self) -> None:
        """Unregister every buffer (the canvas' GL context current)."""
        self.reads.wait_all()
        for v in self.buffers.values():
            v.close()
        self.buffers.clear()


class DeviceLinesVisual(Visual):
    """``connect="segments"`` lines from a positions and a colours buffer (shaders/glsl/device_lines.*)."""

    def __init__(self, width: float = 1.0):
        super().__init__(vcode=shaders.source("glsl/device_lines.vert.glsl"),
                         fcode=shaders.source("glsl/device_lines.frag.glsl"))
        self.positions = gloo.VertexBuffer(np.zeros((2, 3), np.float32))
        self.colors = gloo.VertexBuffer(np.zeros((2, 4), np.float32))
        self.shared_program["a_position"] = self.positions
        self.shared_program["a_color"] = self.colors
        self._draw_mode = "lines"
        self.set_gl_state("translucent", depth_test=True, line_width=width)

    def set_data(self, positions: np.ndarray, colors: np.ndarray) -> None:
        """Host arrays (the same layout CUDA writes): for tests and a first frame. Only while no
        device upload holds these buffers (GeometryUploads.drop their roles first): a shared vertex
        buffer's storage is CUDA's, immutable to GL."""
        self.positions.set_data(np.ascontiguousarray(positions, np.float32))
        self.colors.set_data(np.ascontiguousarray(colors, np.float32))
        self.update()

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis, view):
        return None  # drawn inside a box the camera is framed on explicitly


class DevicePointsVisual(Visual):
    """Round sprites of one colour from a positions buffer (shaders/glsl/device_points.*); ``size``
    in logical pixels, scaled by the canvas' pixel scale as VisPy's Markers are."""

    def __init__(self, color=TRACER_RGBA, size: float = TRACER_SIZE):
        super().__init__(vcode=shaders.source("glsl/device_points.vert.glsl"),
                         fcode=shaders.source("glsl/device_points.frag.glsl"))
        self.positions = gloo.VertexBuffer(np.full((1, 3), HIDDEN, np.float32))
        self.shared_program["a_position"] = self.positions
        self.shared_program["u_color"] = tuple(float(c) for c in color)
        self._uniforms = HeldUniforms(self.shared_program)
        self._uniforms.set("u_size", float(size))
        self._draw_mode = "points"
        self.set_gl_state("translucent", depth_test=True)

    def set_size(self, size: float) -> None:
        self._uniforms.set("u_size", float(size))

    def set_data(self, positions: np.ndarray) -> None:
        """Host (n, 3) positions, HIDDEN rows left out (for tests and a first frame). Only while no
        device upload holds the buffer (GeometryUploads.drop its role first)."""
        self.positions.set_data(np.ascontiguousarray(positions, np.float32))
        self.update()

    def _prepare_draw(self, view):
        view.view_program["u_px_scale"] = view.transforms.pixel_scale

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis, view):
        return None


DeviceLines = scene.visuals.create_visual_node(DeviceLinesVisual)
DevicePoints = scene.visuals.create_visual_node(DevicePointsVisual)

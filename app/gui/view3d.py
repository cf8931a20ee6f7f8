"""The 3D views: a Grid3D in place (three slice planes, volume rendering, box outline and axes,
octree leaves) and 3D particles as shaded spheres with their obstacles as surfaces.

Scene units are the field's world units: cell (i, j, k) of a grid with spacing h covers
[i, i+1)·h × [j, j+1)·h × [k, k+1)·h, as the 2D image does; particles keep their positions.

``volume3d`` packets carry the whole (nz, ny, nx) scalar. It goes into one r32f 3D texture that
every slice plane samples (:class:`SlicePlanesVisual`), so moving or toggling a plane is a change
of a few vertices, not a new packet. The planes sit where :mod:`.slice_pick` says (the centre of
cell ``slice_index(frac, n)``); :mod:`.slice_drag` moves them with the mouse and gives the probes
their pick geometry on them (registered below with the drawer). The volume rendering (VisPy's
``Volume``: MIP or translucent with a transfer-function window inside the colour range) has its
own texture, filled only while it is on. With CuPy and an NVIDIA GL context both textures are written by CUDA
(:class:`nagare.app.gui.interop.VolumeInterop`), otherwise through the host (logged once on CuPy).

3D particles are point sprites lit as spheres whose diameter is the particle spacing in world
units (the pixel size is measured from the camera before every draw, see spheres.vert.glsl);
their position and value buffers are written by CUDA through :class:`~.interop.BufferInterop`
where possible. Their trails (``pk.trails``, (T, n, 3)) are one line visual of short segments:
built on the host (:func:`trail_segments`) on the host path, on the device into CUDA-registered
vertex buffers on the interop path (:mod:`.device_draw`), as are amr3d's tracers and the octree
leaves drawn around a volume.

Solid bodies of a grid (``pk.surfaces``: triangle meshes) are one merged, lit, opaque mesh in the
scene of the slice planes (depth tested: a plane through a body leaves it visible), uploaded only
when the engine hands other arrays, shown while the obstacles switch is on; its light follows the
camera (a headlight from the upper left, :func:`headlight`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from nagare.app import colormaps
from nagare.app.fieldkinds import register
from nagare.app.fieldkinds.boxes import box_segments
from nagare.app.packets import FramePacket, length_units  # noqa: F401  (length_units: tests import it from here)
from nagare.engine.errors import one_line
from vispy import gloo, scene
from vispy.color import Colormap
from vispy.visuals import Visual
from vispy.visuals.transforms import STTransform

from nagare import shaders

from . import device_draw, interop, splat
from .drawer import host
from .held_uniforms import HeldUniforms
from .laid_out_text import LaidOutText
from .overlay_style import LEVEL_COLOURS, TRACER_RGBA, TRACER_SIZE, TRAIL_ALPHA, TRAIL_RGB
from .probe import register_geometry
from .slice_drag import SlicePlaneGeometry
from .slice_pick import slice_index
from .splat import SplatQuad
from .transform_key import transform_key

log = logging.getLogger("nagare")

AXES = ("x", "y", "z")  # scene axes; a (nz, ny, nx) array's axis for scene axis a is 2 - a
AXIS_COLOURS = ((0.95, 0.35, 0.35, 1.0), (0.4, 0.9, 0.4, 1.0), (0.45, 0.6, 1.0, 1.0))
SOLID_RGB = np.array((0.55, 0.56, 0.6), np.float32)
BODY_RGBA = (0.74, 0.75, 0.78, 1.0)  # lit surfaces of solid bodies (grid views)


def level_colours(level) -> np.ndarray:
    """(n,) levels → (n, 4) RGBA from LEVEL_COLOURS (cycled past its end)."""
    lev = np.asarray(level, np.int64)
    return LEVEL_COLOURS[np.mod(lev, len(LEVEL_COLOURS))]


# ---- visuals ---------------------------------------------------------------------------------------
class _LutColormap:
    """A visual whose shader colours through a ``u_lut`` texture (slice planes, spheres)."""

    def set_colormap(self, name: str) -> None:
        # one LUT texture, its data replaced: a new texture object would take another texture unit
        # and the program's samplers could end up sharing one (a validation error on Mesa)
        lut = (colormaps.lut(name) * 255 + 0.5).astype(np.uint8)[None]
        if getattr(self, "_lut", None) is None:
            self._lut = gloo.Texture2D(lut, interpolation="linear", wrapping="clamp_to_edge")
            self.shared_program["u_lut"] = self._lut
        else:
            self._lut.set_data(lut)
        self.update()


class SlicePlanesVisual(_LutColormap, Visual):
    """Up to three axis-aligned planes sampling one r32f 3D texture (shaders/glsl/slice3d.*)."""

    def __init__(self, colormap: str = "viridis"):
        super().__init__(vcode=shaders.source("glsl/slice3d.vert.glsl"), fcode=shaders.source("glsl/slice3d.frag.glsl"))
        self.texture = gloo.Texture3D(np.zeros((2, 2, 2), np.float32), internalformat="r32f",
                                      interpolation="nearest", wrapping="clamp_to_edge")
        self._pos = gloo.VertexBuffer(np.zeros((6, 3), np.float32))
        self._tc = gloo.VertexBuffer(np.zeros((6, 3), np.float32))
        self.shared_program["a_position"] = self._pos
        self.shared_program["a_texcoord"] = self._tc
        self.shared_program["u_volume"] = self.texture
        self._uniforms = HeldUniforms(self.shared_program)
        self._uniforms.set("u_clim", (0.0, 1.0))
        self.set_colormap(colormap)
        self.shape = None  # (nz, ny, nx) of the texture
        self._planes_key = None  # (planes, spacing, shape) the vertex buffers hold
        self._bounds = np.zeros((2, 3))
        self._n = 0
        self._draw_mode = "triangles"
        self.set_gl_state("opaque", depth_test=True, cull_face=False)

    def set_clim(self, clim) -> None:
        self._uniforms.set("u_clim", tuple(float(c) for c in clim))
        self.update()

    def set_volume(self, data: np.ndarray) -> None:
        self.texture.set_data(np.ascontiguousarray(data, np.float32))
        self.shape = tuple(data.shape)
        self.update()

    def set_planes(self, planes: dict, spacing: float) -> None:
        """planes: axis name → fraction, for the planes that are on. Unchanged planes keep their
        vertex buffers: the drawer asks with every packet, and a new upload each frame is GL work
        and UI-thread time that the simulation's thread waits for (the GIL)."""
        key = (tuple(planes.items()), float(spacing), self.shape)
        if key == self._planes_key:
            return
        self._planes_key = key
        nz, ny, nx = self.shape
        n = np.array([nx, ny, nz], np.float64)
        ext = n * spacing
        pos, tc = [], []
        quad = np.array([(0, 0), (1, 0), (1, 1), (0, 0), (1, 1), (0, 1)], np.float64)
        for axis, frac in planes.items():
            a = AXES.index(axis)
            i = slice_index(frac, int(n[a]))
            u, v = [b for b in range(3) if b != a]
            p = np.zeros((6, 3))
            t = np.zeros((6, 3))
            p[:, a] = (i + 0.5) * spacing
            t[:, a] = (i + 0.5) / n[a]  # the texel centre of cell i: nearest sampling picks it exactly
            p[:, u], p[:, v] = quad[:, 0] * ext[u], quad[:, 1] * ext[v]
            t[:, u], t[:, v] = quad[:, 0], quad[:, 1]
            pos.append(p)
            tc.append(t)
        self._n = 6 * len(pos)
        if pos:
            self._pos.set_data(np.concatenate(pos).astype(np.float32))
            self._tc.set_data(np.concatenate(tc).astype(np.float32))
        self._bounds = np.stack([np.zeros(3), ext])
        self.update()

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _prepare_draw(self, view):
        return self._n > 0

    def _compute_bounds(self, axis, view):
        return self._bounds[0, axis], self._bounds[1, axis]


SlicePlanes = scene.visuals.create_visual_node(SlicePlanesVisual)


class SphereVisual(_LutColormap, Visual):
    """3D particles as lit sphere sprites of a world diameter (shaders/glsl/spheres.*). Their size
    reference is held in logical px and drawn at the framebuffer's px per logical px (as the tracer
    overlay): measured from the camera before a screen frame, it holds for an export at another size."""

    def __init__(self, colormap: str = "viridis"):
        super().__init__(vcode=shaders.source("glsl/spheres.vert.glsl"), fcode=shaders.source("glsl/spheres.frag.glsl"))
        self.positions = gloo.VertexBuffer(np.zeros((1, 3), np.float32))
        self.values = gloo.VertexBuffer(np.zeros(1, np.float32))
        self.shared_program["a_position"] = self.positions
        self.shared_program["a_value"] = self.values
        self._uniforms = HeldUniforms(self.shared_program)  # the point scale is set before every draw
        self.size_ref = 4.0  # logical px: one diameter at clip w = u_w_ref
        self._uniforms.set("u_w_ref", 1.0)
        self._uniforms.set("u_clim", (0.0, 1.0))
        self.set_colormap(colormap)
        self.count = 0
        self.diameter = 1.0  # world units
        self._bounds = np.zeros((2, 3))
        self._draw_mode = "points"
        self.set_gl_state("opaque", depth_test=True)

    def set_data(self, positions: np.ndarray | None, values: np.ndarray | None, clim=(0.0, 1.0)) -> None:
        """Host arrays; None leaves a buffer as it is (interop wrote it)."""
        if positions is not None:
            pos = np.ascontiguousarray(positions, np.float32)
            self.positions.set_data(pos)
            self.count = len(pos)
            if len(pos):
                self._bounds = np.stack([pos.min(axis=0), pos.max(axis=0)])
        if values is not None:
            self.values.set_data(np.ascontiguousarray(values, np.float32))
        self._uniforms.set("u_clim", tuple(float(c) for c in clim))
        self.update()

    def set_point_scale(self, size_ref: float, w_ref: float) -> None:
        """One diameter is ``size_ref`` logical px at clip w = ``w_ref``."""
        self.size_ref = float(size_ref)
        self._uniforms.set("u_w_ref", float(w_ref))

    def _prepare_draw(self, view):
        px = float(view.transforms.pixel_scale)
        self._uniforms.set("u_size_ref", self.size_ref * px)
        self._uniforms.set("u_min_size", splat.MIN_SPRITE_PX * px)  # logical px, as the splat's least sprite

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis, view):
        return self._bounds[0, axis], self._bounds[1, axis]


Spheres = scene.visuals.create_visual_node(SphereVisual)


def box_faces(lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Triangles (36 vertices) of the box lo..hi and a flat grey per face orientation (the faces
    read as a solid without a light: top brightest, sides mid, bottom darkest)."""
    lo, hi = np.asarray(lo, np.float32), np.asarray(hi, np.float32)
    c = np.array([[hi[d] if (k >> d) & 1 else lo[d] for d in range(3)] for k in range(8)], np.float32)
    faces = [((0, 2, 6, 4), 0.62), ((1, 5, 7, 3), 0.72),  # x = lo, x = hi
             ((0, 4, 5, 1), 0.55), ((2, 3, 7, 6), 0.8),  # y = lo, y = hi
             ((0, 1, 3, 2), 0.4), ((4, 6, 7, 5), 1.0)]  # z = lo, z = hi (top)
    verts, cols = [], []
    for (a, b, cc, d), shade in faces:
        verts += [c[a], c[b], c[cc], c[a], c[cc], c[d]]
        cols += [np.append(SOLID_RGB * shade, 1.0)] * 6
    return np.array(verts, np.float32), np.array(cols, np.float32)


def merge_surfaces(surfaces) -> tuple[np.ndarray, np.ndarray]:
    """(vertices, faces) pairs → one (V, 3) float32 vertex and (F, 3) uint32 face array."""
    verts, faces, base = [], [], 0
    for v, f in surfaces:
        v = np.asarray(v, np.float32).reshape(-1, 3)
        verts.append(v)
        faces.append(np.asarray(f, np.int64).reshape(-1, 3) + base)
        base += len(v)
    if not verts:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32)
    return np.concatenate(verts), np.concatenate(faces).astype(np.uint32)


def trail_segments(trails, max_step=None) -> tuple[np.ndarray, np.ndarray]:
    """A (T, n, 3) trail ring → (2m, 3) float32 segment end points and (2m, 4) RGBA colours for a
    ``connect="segments"`` line: consecutive samples of one particle are joined, a segment with a
    non-finite end is dropped, alpha fades from the newest sample to the oldest.

    Axis 0 is in time order (oldest first), or a ring whose slot after the newest sample is NaN for
    every particle: the first all-NaN slot after a written one is that gap, and the slot after it
    the oldest. Without such a slot the order is taken as it is (slot T-1 newest).

    ``max_step`` ((3,) or a scalar): a segment longer than that along an axis is dropped too — a
    particle wrapped around a periodic domain (pass half the domain's extent)."""
    pts, counts = trail_points(trails, max_step)
    return pts, trail_colours(counts)


def trail_points(trails, max_step=None) -> tuple[np.ndarray, np.ndarray]:
    """The end points of :func:`trail_segments` and the number of segments of each age (oldest
    first): the colours depend on these counts only (a drawer keeps them while they stay)."""
    t = np.asarray(trails, np.float32)
    if t.ndim != 3 or t.shape[0] < 2 or t.shape[2] != 3 or t.shape[1] == 0:
        return np.zeros((0, 3), np.float32), np.zeros(max(t.shape[0] - 1, 0) if t.ndim == 3 else 0, np.int64)
    n_t, n = t.shape[:2]
    f3 = np.isfinite(t)
    finite = f3[..., 0] & f3[..., 1] & f3[..., 2]  # (T, n); faster than .all(axis=2)
    unused = ~finite.any(axis=1)  # slots no particle has written
    gaps = np.flatnonzero(unused & ~np.roll(unused, 1))
    if len(gaps) and gaps[0] != n_t - 1:
        order = (gaps[0] + 1 + np.arange(n_t)) % n_t  # oldest first, the gap last
        t, finite = t[order], finite[order]
    ok = finite[:-1] & finite[1:]  # (T-1, n): both ends written
    counts = ok.sum(axis=1)  # segments per age (0 = the oldest): row order keeps them sorted by age
    first = np.flatnonzero(ok.ravel())  # row k·n + p of t: sample k of particle p
    first = first.astype(np.int32) if t.shape[0] * n < 2 ** 31 - 1 else first
    ends = np.empty(2 * len(first), first.dtype)
    ends[0::2], ends[1::2] = first, first + n  # and sample k + 1 of the same particle
    pts = np.take(t.reshape(-1, 3), ends, axis=0)
    if max_step is not None and len(first):
        jump = (np.abs(pts[1::2] - pts[0::2]) > np.asarray(max_step, np.float32)).any(axis=1)
        if jump.any():
            keep = ~jump
            pts = pts.reshape(-1, 2, 3)[keep].reshape(-1, 3)
            counts = np.bincount(first[keep] // n, minlength=n_t - 1)
    return pts, counts


def trail_colours(counts) -> np.ndarray:
    """(2m, 4) RGBA of the segment ends for ``counts[k]`` segments of age k (0 = the oldest)."""
    counts = np.asarray(counts, np.int64)
    n_age = len(counts)
    if not n_age:
        return np.zeros((0, 4), np.float32)
    lo, hi = TRAIL_ALPHA
    rgba = np.empty((n_age, 2, 4), np.float32)  # per age: its two ends
    rgba[:, :, :3] = TRAIL_RGB
    rgba[:, 0, 3] = lo + (hi - lo) * np.arange(n_age) / n_age
    rgba[:, 1, 3] = lo + (hi - lo) * np.arange(1, n_age + 1) / n_age
    return np.repeat(rgba.reshape(n_age, 8), counts, axis=0).reshape(-1, 4)


# ---- camera ----------------------------------------------------------------------------------------
def project(view, pts) -> np.ndarray:
    """Scene points → (n, 2) pixel coordinates inside the view box (logical px, y down)."""
    m = view.scene.transform.map(np.asarray(pts, np.float64))
    return m[:, :2] / m[:, 3:4]


def box_corners(lo, hi) -> np.ndarray:
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    return np.array([[hi[d] if (k >> d) & 1 else lo[d] for d in range(3)] for k in range(8)])


def frame_box(view, lo, hi, fill: float = 0.86) -> None:
    """Point the orbit camera at the box lo..hi and zoom until its 8 corners span ``fill`` of the
    view box's smaller relative extent (bisection on the camera's scale factor)."""
    cam = view.camera
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    cam.center = tuple((lo + hi) / 2)
    diag = float(np.linalg.norm(hi - lo)) or 1.0
    corners = box_corners(lo, hi)
    w, h = view.size
    if w < 2 or h < 2:
        cam.scale_factor = 1.15 * diag
        return
    margin_x, margin_y = (1 - fill) / 2 * w, (1 - fill) / 2 * h

    def fits(sf):
        cam.scale_factor = sf
        p = project(view, corners)
        return bool(np.all(np.isfinite(p)) and (p[:, 0] >= margin_x).all() and (p[:, 0] <= w - margin_x).all()
                    and (p[:, 1] >= margin_y).all() and (p[:, 1] <= h - margin_y).all())

    a, b = 0.05 * diag, 4.0 * diag  # too close … surely inside
    if not fits(b):
        cam.scale_factor = b
        return
    for _ in range(30):
        mid = 0.5 * (a + b)
        if fits(mid):
            b = mid
        else:
            a = mid
    cam.scale_factor = b


def point_scale(view, node, centre, diameter: float) -> tuple[float, float]:
    """(pixel size of ``diameter`` at ``centre``, clip w there): the sphere sprites' size reference.

    Measured along the camera's screen-right direction, so it holds for any orbit angle."""
    cam = view.camera
    right = np.asarray(cam.transform.map([1, 0, 0])[:3] - cam.transform.map([0, 0, 0])[:3], np.float64)
    right /= np.linalg.norm(right) or 1.0
    c = np.asarray(centre, np.float64)
    tr = node.get_transform("visual", "framebuffer")
    a, b = tr.map(np.stack([c, c + diameter * right]))
    size = float(np.linalg.norm(a[:2] / a[3] - b[:2] / b[3]))
    w = float(node.get_transform("visual", "render").map(c)[3])
    return size, w


def headlight(camera) -> tuple[float, float, float]:
    """The direction light travels (scene coordinates) for a light at the camera, a little above
    and left of it: surfaces facing the viewer are lit from any orbit angle."""
    tr = camera.transform  # camera frame → scene: x right, y up, z toward the eye
    o = np.asarray(tr.map([0, 0, 0])[:3], np.float64)
    right, up, back = (np.asarray(tr.map(e)[:3], np.float64) - o for e in np.eye(3))
    d = -back / (np.linalg.norm(back) or 1.0) + 0.45 * right / (np.linalg.norm(right) or 1.0) \
        - 0.55 * up / (np.linalg.norm(up) or 1.0)
    return tuple(float(x) for x in d / np.linalg.norm(d))


# ---- the canvas-side state of the 3D grid view --------------------------------------------------------
@dataclass
class View3DState:
    planes: dict = field(default_factory=lambda: {"x": [True, 0.5], "y": [True, 0.5], "z": [True, 0.5]})
    volume: str = "off"  # off | mip | translucent
    window: tuple[float, float] = (0.0, 1.0)  # the volume's transfer-function range, fractions of the colour range
    outline: bool = True  # box outline and axes
    boxes: bool = True  # octree leaves (Boxes) around the volume

    def active_planes(self) -> dict:
        return {a: float(p[1]) for a, p in self.planes.items() if p[0]}


def _translucent_cmap(name: str) -> Colormap:
    rgb = colormaps.lut(name)
    alpha = np.linspace(0.0, 1.0, len(rgb)) ** 1.5 * 0.5
    return Colormap(np.concatenate([rgb, alpha[:, None]], axis=1))


LABEL_PT = 9  # the box labels' font size (points)
LABEL_GAP = 6.0  # logical px between a box edge and its label's nearest side


class Frame3D:
    """Box outline, coloured axes and their labels (each axis' range with units) of a 3D view.

    An axis label lay at the end of the axis from the box's origin corner: looking down on the box,
    the y axis runs into the picture and "y 32" sat over the middle of the data, and "z 0.52 m" on
    its own axis line. Now :meth:`place` (before each frame the camera moved) puts each axis' line
    on the one of the box's four edges along that axis that lies farthest out on the screen, and
    its label outside the box beside that edge's middle, clear of the outline. The outline and
    axes are depth tested: a back edge is hidden behind what is drawn in front of it."""

    def __init__(self, canvas, prefix: str):
        self.outline = scene.visuals.Line(connect="segments", color=(0.75, 0.75, 0.8, 1.0), antialias=False)
        self.axes = scene.visuals.Line(connect="segments", width=2.0)
        for line in (self.outline, self.axes):
            line.set_gl_state("translucent", depth_test=True)
        self.labels = LaidOutText("", color="white", font_size=LABEL_PT, anchor_x="center", anchor_y="center")
        self.names = [f"{prefix}_outline", f"{prefix}_axes", f"{prefix}_labels"]
        for name, node in zip(self.names, (self.outline, self.axes, self.labels)):
            canvas.add_visual(name, node)
        self.box = None
        self.texts: list[str] = []
        self.edges: list[tuple[int, int]] = []  # per axis: the corners (box_corners' index) of its edge
        self._placed_for = None  # the projected corners the labels were placed for

    def set_box(self, lo, hi, units: str) -> None:
        lo, hi = np.asarray(lo, np.float32), np.asarray(hi, np.float32)
        if self.box is not None and np.array_equal(self.box[0], lo) and np.array_equal(self.box[1], hi):
            return
        self.box = (lo, hi)
        self._placed_for = None
        self.outline.set_data(box_segments(lo[None], hi[None]))
        u = f" {units}" if units else ""
        # per axis: its range, and its far end alone for a view too narrow for the range
        self.texts = [(f"{AXES[a]} {_fmt(lo[a])} .. {_fmt(hi[a])}{u}", f"{AXES[a]} {_fmt(hi[a])}{u}")
                      for a in range(3)]
        self.labels.text = [t[0] for t in self.texts]
        # until the first place(): the axes from the origin corner, labels at their middles
        self._set_axes([(0, 1 << a) for a in range(3)], [(lo + _unit(a) * (hi - lo) / 2) for a in range(3)])

    def _set_axes(self, edges, label_pos) -> None:
        corners = box_corners(*self.box).astype(np.float32)
        self.edges = list(edges)
        seg = [corners[i] for e in edges for i in e]
        col = [AXIS_COLOURS[a] for a in range(3) for _ in range(2)]
        self.axes.set_data(np.array(seg, np.float32), color=np.array(col, np.float32))
        self.labels.pos = np.array(label_pos, np.float32)

    def place(self, view, dpi: float = 96.0) -> None:
        """Put the axes and their labels on the box's outer edges for the camera as it is now."""
        if self.box is None:
            return
        corners = box_corners(*self.box)
        screen = project(view, corners)
        if not np.isfinite(screen).all():
            return
        if self._placed_for is not None and np.allclose(screen, self._placed_for, atol=0.25):
            return
        self._placed_for = screen
        centre = screen.mean(axis=0)
        size = np.asarray(view.size, np.float64)  # the view box, logical px (project's frame)
        char_w, line_h = 0.6 * LABEL_PT * dpi / 72, 1.2 * LABEL_PT * dpi / 72  # px, DejaVu-like widths
        hull = _convex_hull(screen)
        edges, pos, taken, texts = [], [], [], []
        for a in range(3):
            choice = None
            for text in self.texts[a]:  # the whole range; the short form where that does not fit
                half = 0.5 * np.array([char_w * len(text), line_h])
                best = self._best_spot(screen, centre, hull, a, half, size, taken)
                if choice is None or best[0] > choice[0][0]:
                    choice = (best, text, half)
                if best[0][0]:
                    break
            (_, (i, j), target), text, half = choice
            taken.append((target - half, target + half))
            edges.append((i, j))
            texts.append(text)
            pos.append(_unproject_near(view, (corners[i] + corners[j]) / 2, a, target, self.box))
        if texts != self.labels.text:
            self.labels.text = texts
        self._set_axes(edges, pos)

    @staticmethod
    def _best_spot(screen, centre, hull, a, half, size, taken):
        """(key, edge, label centre) of the best place for axis ``a``'s label of half-size ``half``:
        beside one of the axis' edges on the box's outline or past one of its ends, inside the
        view, clear of the box and of the labels placed before (key[0]: all of that holds)."""
        best = None
        for i, j in ((k, k | (1 << a)) for k in range(8) if not (k >> a) & 1):
            if not _on_outline(screen, i, j):
                continue  # an inner edge: a label beside it would lie on the data
            mid = (screen[i] + screen[j]) / 2
            out = mid - centre
            n = float(np.linalg.norm(out))
            out = out / n if n > 1e-6 else np.array([0.0, 1.0])
            # beside the edge's middle, outward; or past either end (an edge that runs up the
            # screen has room above or below it where a line of text beside it has none)
            # (a spot pushed back into the view may meet the box: the same spots a line or two further out)
            dirs = [(mid, out)]
            for end, other in ((screen[i], screen[j]), (screen[j], screen[i])):
                along = end - other
                m = float(np.linalg.norm(along))
                if m > 1e-6:
                    dirs.append((end, along / m))
            spots = [p + d * (LABEL_GAP + extra * half[1] + abs(d[0]) * half[0] + abs(d[1]) * half[1])
                     for extra in (0, 2, 4) for p, d in dirs]
            for rank, target in enumerate(spots):
                target = np.clip(target, half, np.maximum(size - half, half))  # never off the view
                rect = (target - half, target + half)
                clear = not _rect_meets_polygon(rect, hull) and not any(_rects_meet(rect, r) for r in taken)
                key = (clear, -rank, round(n, 1), float(mid[1]))
                if best is None or key > best[0]:
                    best = (key, (i, j), target)
        if best is None:  # every edge along this axis seen end-on: the one from the origin corner
            best = ((False,), (0, 1 << a), (screen[0] + screen[1 << a]) / 2)
        return best


def _convex_hull(points: np.ndarray) -> np.ndarray:
    """The convex hull of 2D points, counter-clockwise (monotone chain)."""
    pts = sorted(map(tuple, np.asarray(points, np.float64)))

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return np.array(half(pts) + half(pts[::-1]))


def _rects_meet(a, b) -> bool:
    return bool((a[0] < b[1]).all() and (b[0] < a[1]).all())


def _rect_meets_polygon(rect, poly: np.ndarray) -> bool:
    """Whether an axis-aligned rectangle (lo, hi) and a convex polygon overlap (separating axes)."""
    lo, hi = rect
    box = np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]])
    if len(poly) < 3:
        return False
    axes = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    axes += [np.array([-(q[1] - p[1]), q[0] - p[0]]) for p, q in zip(poly, np.roll(poly, -1, axis=0))]
    for ax in axes:
        a, b = box @ ax, poly @ ax
        if a.max() <= b.min() or b.max() <= a.min():
            return False
    return True


def _on_outline(screen: np.ndarray, i: int, j: int) -> bool:
    """Whether the box edge from corner i to corner j lies on the outline of the box's projection
    (every corner on one side of its line); an edge seen end-on is not."""
    d = screen[j] - screen[i]
    if float(np.hypot(*d)) < 1e-6:
        return False
    r = screen - screen[i]
    cross = d[0] * r[:, 1] - d[1] * r[:, 0]
    tol = 1e-6 * float(np.abs(cross).max() or 1.0)
    return bool((cross >= -tol).all() or (cross <= tol).all())


def _unit(a: int) -> np.ndarray:
    return np.eye(3, dtype=np.float32)[a]


def _unproject_near(view, world, axis: int, target, box) -> np.ndarray:
    """A scene point in the plane through ``world`` across ``axis`` that projects to the screen
    point ``target`` (two Newton steps on the projection; the box's size sets the step for the
    derivatives)."""
    h = 1e-3 * float(np.max(box[1] - box[0]) or 1.0)
    others = [d for d in range(3) if d != axis]
    p = np.asarray(world, np.float64).copy()
    for _ in range(2):
        base = project(view, p[None])[0]
        jac = np.stack([(project(view, (p + h * _unit(d))[None])[0] - base) / h for d in others], axis=1)
        try:
            step = np.linalg.lstsq(jac, np.asarray(target, np.float64) - base, rcond=None)[0]
        except np.linalg.LinAlgError:
            break
        if not np.isfinite(step).all():
            break
        for d, t in zip(others, step):
            p[d] += t
    return p.astype(np.float32)


def _fmt(v: float) -> str:
    return f"{float(v):.4g}"




# ---- drawers --------------------------------------------------------------------------------------------
def _registered(cache: dict, name: str, gl_object, canvas, make):
    """The CUDA–GL registration of a GL texture/buffer, made once per name (``make(gl handle)``)."""
    it = cache.get(name)
    if it is None:
        handle = int(canvas.context.shared.parser._objects[gl_object.id].handle)
        it = cache[name] = make(handle)
    return it


def _close_all(cache: dict) -> None:
    for it in cache.values():
        it.close()
    cache.clear()


class VolumeDrawer:
    """``volume3d``: slice planes in place, volume rendering, box outline and axes, octree leaves,
    solid bodies as lit surfaces."""

    label = "host (geometry)"

    def __init__(self):
        self.visuals = ()
        self.frame = None
        self.planes = None
        self.volume = None
        self.leaves = None
        self.bodies = None
        self.tracers = None  # 3D particles drawn inside the volume (amr3d's tracers) and their trails
        self.tracer_trails = None
        self._surfaces = ()  # the (vertices, faces) arrays in the mesh (held: ids cannot be reused)
        self._bodies_spacing = None
        self._light = None
        self._shape = None
        self._spacing = None
        self._mask_key = None
        self._interops: dict = {}
        self._volume_seq = None
        self.path = "undecided"
        self.uploads = {"host": 0, "interop": 0}
        self.dev_tracers = self.dev_trails = self.dev_leaves = None
        self.device = device_draw.GeometryUploads()  # the interop path's tracers, trails and leaves
        self._leaves_key = None  # the packet's boxes tuple the device leaves were built from
        self._leaves_legend = None
        self._device_shift = None  # (spacing, node) the device visuals' transforms were set for
        self._host_shift = None  # the same for the host path's tracers and trails
        self.leaf_uploads = 0

    def three_d(self, pk):
        return True

    def setup(self, canvas) -> None:
        if self.planes is None:
            self.planes = SlicePlanes(canvas.colormap_name)
            canvas.add_visual("planes3d", self.planes)
            self.frame = Frame3D(canvas, "grid3d")
            self.leaves = scene.visuals.Line(connect="segments", antialias=False)
            canvas.add_visual("leaves3d", self.leaves)
            # a placeholder triangle (hidden): VisPy's shading filter needs mesh data to attach to
            self.bodies = scene.visuals.Mesh(np.eye(3, dtype=np.float32), np.array([[0, 1, 2]], np.uint32),
                                             color=BODY_RGBA, shading="smooth")
            self.bodies.set_gl_state("opaque", depth_test=True, cull_face=False)
            sf = self.bodies.shading_filter
            sf.ambient_light, sf.diffuse_light, sf.specular_light = (1, 1, 1, 0.3), (1, 1, 1, 0.75), (1, 1, 1, 0.2)
            sf.shininess = 40
            canvas.add_visual("bodies3d", self.bodies)
            self.tracers = scene.visuals.Markers(pos=np.zeros((1, 3), np.float32))  # data: the camera's bounds ask it
            self.tracers.visible = False
            self.tracers.set_gl_state("translucent", depth_test=True)
            canvas.add_visual("tracers3d", self.tracers)
            self.tracer_trails = scene.visuals.Line(np.zeros((2, 3), np.float32), connect="segments", antialias=False)
            self.tracer_trails.visible = False
            self.tracer_trails.set_gl_state("translucent", depth_test=True)
            canvas.add_visual("tracertrails3d", self.tracer_trails)
            # the same three on the interop path, their vertex buffers written by CUDA (device_draw.py)
            self.dev_tracers = device_draw.DevicePoints()
            self.dev_trails = device_draw.DeviceLines()
            self.dev_leaves = device_draw.DeviceLines()
            for name, node in (("tracers3d_device", self.dev_tracers), ("tracertrails3d_device", self.dev_trails),
                               ("leaves3d_device", self.dev_leaves)):
                node.visible = False
                canvas.add_visual(name, node)
        self.visuals = ("planes3d", *self.frame.names)

    def display_label(self, canvas) -> str:
        return self.path

    # --- upload
    def upload(self, canvas, pk: FramePacket) -> None:
        host_volume = None
        lo_v, hi_v = canvas.colour_range(pk)
        canvas.current_range = (lo_v, hi_v)
        shape = tuple(pk.data.shape)
        new_shape = shape != self._shape
        canvas._decide_path()
        self.path = canvas.display_path
        if self.path == "interop" and not new_shape:
            self._interop("planes", self.planes.texture, canvas, shape).upload(pk.data, pk.event)
            self.uploads["interop"] += 1
        else:
            self._drop_interops()
            canvas.host_copies += pk.backend == "cupy"
            host_volume = host(pk.data, pk.backend, "field")
            self.planes.set_volume(host_volume)
            self.uploads["host"] += 1
        self.planes.set_clim((lo_v, hi_v))  # solid cells arrive as SOLID (the snapshot wrote them)
        node = getattr(pk, "centering", "cell") == "node"
        if new_shape or pk.spacing != self._spacing or node != self._node:
            self._shape, self._spacing, self._node = shape, pk.spacing, node
            # cell samples fill [i, i+1)·h; node samples are centred on their points i·h (amr3d), so
            # the planes move back by h/2 and the box is the domain's
            self.planes.transform = STTransform(translate=(-0.5 * pk.spacing,) * 3 if node else (0, 0, 0))
            self.frame.set_box((0, 0, 0), self._box_size(pk), length_units(pk))
            canvas._fit = True
        self.apply_state(canvas, pk)
        if self.volume is not None and self.volume.visible:
            if self.path == "interop" and not new_shape and self.volume_shape == shape:
                self._interop("volume", self.volume._texture, canvas, shape).upload(pk.data, pk.event)
            else:
                self.volume.set_data(host_volume if host_volume is not None else host(pk.data, pk.backend, "field"))
                self.volume_shape = shape
        self._upload_leaves(canvas, pk)
        self._upload_bodies(canvas, pk)
        self._upload_tracers(canvas, pk)

    volume_shape = None
    _node = False
    _volume_look = None  # (method, colour map) the volume's shader was built for

    @staticmethod
    def _box_size(pk) -> np.ndarray:
        if getattr(pk, "extent", None) is not None:
            return np.asarray(pk.extent, np.float64)
        nz, ny, nx = pk.data.shape
        return np.array([nx, ny, nz], np.float64) * pk.spacing

    def _world_shift(self, pk) -> STTransform:
        """World positions (bodies, tracers) onto the drawn samples: a cell sample i is drawn at the
        centre of cell i, (i + ½)·h; a node sample at i·h."""
        return STTransform(translate=(0.0 if self._node else 0.5 * pk.spacing,) * 3)

    def _upload_tracers(self, canvas, pk) -> None:
        """The packet's 3D particles (world units, as the bodies: shifted by half a sample onto the
        drawn cells) as points, with their trails; parked ones (NaN) are left out."""
        self.dev_tracers.visible = self.dev_trails.visible = False
        if self.path == "interop" and not self.device.failed and self._upload_tracers_device(canvas, pk):
            self.tracers.visible = self.tracer_trails.visible = False
            return
        pos = None if pk.overlay is None else host(pk.overlay, pk.backend, "tracers")
        on = pos is not None and pos.ndim == 2 and pos.shape[1] == 3  # None: the View dock's overlay is off
        pts = pos[np.isfinite(pos).all(axis=1)] if on else None
        self.tracers.visible = bool(on and len(pts))
        self.tracer_trails.visible = False
        if not self.tracers.visible:
            return
        self._set_host_shift(pk)
        self.tracers.set_data(pts, face_color=TRACER_RGBA, edge_width=0, size=TRACER_SIZE)
        if pk.trails is not None:
            half = 0.5 * np.array(self._shape[::-1], np.float64) * pk.spacing
            seg, counts = trail_points(host(pk.trails, pk.backend, "trails"), half)
            if len(seg):
                self.tracer_trails.set_data(seg, color=trail_colours(counts))
                self.tracer_trails.visible = True

    def _set_host_shift(self, pk) -> None:
        key = (pk.spacing, self._node)
        if key != self._host_shift:  # only on change: a new transform relinks the visual's program
            self._host_shift = key
            for node in (self.tracers, self.tracer_trails):
                node.transform = self._world_shift(pk)

    # --- the tracers, their trails and the leaves from the device (interop path)
    def _set_device_shift(self, pk) -> None:
        key = (pk.spacing, self._node)
        if key != self._device_shift:  # only on change: a new transform relinks the visual's program
            self._device_shift = key
            for node in (self.dev_tracers, self.dev_trails):
                node.transform = self._world_shift(pk)

    def _upload_tracers_device(self, canvas, pk) -> bool:
        """False where the device upload failed (the host path draws them instead)."""
        pos = pk.overlay
        if pos is None or pos.ndim != 2 or pos.shape[1] != 3 or not pos.shape[0]:
            return True
        trails = pk.trails
        if trails is not None and (trails.ndim != 3 or trails.shape[0] < 2 or not trails.shape[1]):
            trails = None
        self._set_device_shift(pk)
        points = self.device.buffer("tracers", self.dev_tracers.positions, 3, (device_draw.HIDDEN, 0, 0))
        ends = self.device.buffer("trail ends", self.dev_trails.positions, 3, (0, 0, 0))
        colours = self.device.buffer("trail colours", self.dev_trails.colors, 4, (0, 0, 0, 0))
        half = 0.5 * np.array(self._shape[::-1], np.float64) * pk.spacing  # a jump across a periodic box

        def build(xp):
            parts = [(points, device_draw.point_positions(xp, pos), (device_draw.HIDDEN, 0, 0))]
            if trails is not None:
                seg, rgba = device_draw.trail_lines(xp, trails, half)
                parts += [(ends, seg, (0, 0, 0)), (colours, rgba, (0, 0, 0, 0))]
            return parts

        if not self.device.upload(canvas, pk.event, (pos, trails), build):
            return False
        self.dev_tracers.visible = True
        self.dev_trails.visible = trails is not None
        return True

    def _upload_leaves_device(self, canvas, pk) -> bool:
        """The leaves' lines, built again only when the packet carries other boxes arrays (the worker
        hands out the same copy until the engine regrids). False where the device upload failed."""
        if pk.boxes is not self._leaves_key:
            lo, hi, level = pk.boxes
            levels = getattr(pk, "boxes_levels", None)
            if levels is None:  # a packet that does not say which levels it holds: read them (once)
                levels = [0] if level is None else np.unique(host(level, pk.backend, "leaf levels")).tolist()
            ends = self.device.buffer("leaf ends", self.dev_leaves.positions, 3, (0, 0, 0))
            colours = self.device.buffer("leaf colours", self.dev_leaves.colors, 4, (0, 0, 0, 0))

            def build(xp):
                seg, rgba = device_draw.leaf_lines(xp, lo, hi, level)
                return [(ends, seg, (0, 0, 0)), (colours, rgba, (0, 0, 0, 0))]

            if not self.device.upload(canvas, pk.event, pk.boxes, build):
                return False
            self._leaves_key = pk.boxes  # only now: a failed upload is not taken for a built one
            self._leaves_legend = sorted(int(v) for v in levels)
            self.leaf_uploads += 1
        canvas.legend_levels = self._leaves_legend
        self.dev_leaves.visible = True
        return True

    def _interop(self, name, texture, canvas, shape):
        return _registered(self._interops, name, texture, canvas, lambda h: interop.VolumeInterop(h, shape))

    def _drop_interops(self) -> None:
        _close_all(self._interops)

    def release_device(self) -> None:
        """Every CUDA registration of this drawer's GL objects released (the canvas closes)."""
        self._drop_interops()
        self.device.close()

    def _upload_leaves(self, canvas, pk) -> None:
        on = pk.boxes is not None and canvas.view3d.boxes
        self.leaves.visible = self.dev_leaves.visible = False
        canvas.legend_levels = None
        if not on:
            return
        if self.path == "interop" and not self.device.failed and self._upload_leaves_device(canvas, pk):
            return
        self._leaves_key = None
        self.leaves.visible = True
        lo, hi, level = (host(a, pk.backend, "leaves") for a in pk.boxes)
        level = np.zeros(len(lo), np.int64) if level is None else level
        canvas.legend_levels = sorted(set(np.unique(level).tolist()))
        pts = box_segments(lo, hi)
        self.leaves.set_data(pts, color=np.repeat(level_colours(level), 24, axis=0))

    def _upload_bodies(self, canvas, pk) -> None:
        """The packet's solid bodies (triangle meshes): one merged mesh, uploaded again only when
        the engine hands other arrays (it returns the same ones every frame)."""
        surfaces = tuple(getattr(pk, "surfaces", None) or ())
        same = len(surfaces) == len(self._surfaces) and all(
            v is v0 and f is f0 for (v, f), (v0, f0) in zip(surfaces, self._surfaces))
        if not same:
            self._surfaces = surfaces
            if surfaces:
                verts, faces = merge_surfaces((host(v, pk.backend, "bodies"), host(f, pk.backend, "bodies"))
                                              for v, f in surfaces)
                self.bodies.set_data(vertices=verts, faces=faces, color=BODY_RGBA)
        if surfaces and (pk.spacing, self._node) != self._bodies_spacing:
            # a vertex at i·spacing lies on sample i: drawn where that sample is (_world_shift)
            self._bodies_spacing = (pk.spacing, self._node)
            self.bodies.transform = self._world_shift(pk)
        self.bodies.visible = bool(surfaces) and canvas.show_obstacles

    def apply_state(self, canvas, pk=None) -> None:
        """Planes, volume mode and outline from canvas.view3d (no new data needed)."""
        st = canvas.view3d
        if self.planes.shape is None:
            return
        self.planes.set_planes(st.active_planes(), self._spacing or 1.0)
        for name in self.frame.names:
            canvas.visuals[name].visible = st.outline
        lo_v, hi_v = canvas.current_range
        if st.volume == "off":
            if self.volume is not None:
                self.volume.visible = False
            return
        first = self.volume is None
        if first:
            data = host(canvas.shown.data if pk is None else pk.data,
                               canvas.shown.backend if pk is None else pk.backend, "field")
            self.volume = scene.visuals.Volume(data, method=st.volume, texture_format="r32f",
                                               cmap=Colormap(colormaps.lut(canvas.colormap_name)))
            self.volume_shape = tuple(data.shape)
            canvas.add_visual("volume3d", self.volume)
            self.volume.order = 5  # after the planes: the ray cast reads their depth
        elif self.volume_shape is None and canvas.shown is not None:
            self.volume.set_data(host(canvas.shown.data, canvas.shown.backend, "field"))
            self.volume_shape = tuple(canvas.shown.data.shape)
        v = self.volume
        v.visible = True
        sp = self._spacing or 1.0
        tr = (sp, sp, sp)
        shift = 0.0 if self._node else 0.5 * sp  # VisPy's voxel centres sit at integers
        if (not isinstance(v.transform, STTransform) or tuple(v.transform.scale[:3]) != tr
                or float(v.transform.translate[0]) != shift):
            v.transform = STTransform(scale=tr, translate=(shift,) * 3)
        a, b = st.window
        if v.method != st.volume or first:
            # A MIP is a projection along the whole ray: depth-tested against the slice planes it
            # showed holes wherever a plane lay in front of the ray's maximum. Drawn over them it
            # stays whole (the planes show where the transfer window leaves the MIP empty); the
            # translucent mode keeps the depth test, so the planes cut it where they are.
            v.set_gl_state("translucent", cull_face=False, depth_test=st.volume != "mip")
        look = (st.volume, canvas.colormap_name)
        if first or look != self._volume_look:
            # only on a change: VisPy's Volume swaps shader snippets for a method and a Function
            # for a colour map, either of which rebuilds (recompiles) its program; this runs for
            # every packet
            self._volume_look = look
            v.method = st.volume
            v.cmap = _translucent_cmap(canvas.colormap_name) if st.volume == "translucent" else Colormap(
                colormaps.lut(canvas.colormap_name))
        v.clim = (lo_v + a * (hi_v - lo_v), lo_v + max(b, a + 1e-6) * (hi_v - lo_v))

    def set_colormap(self, canvas, name: str) -> None:
        if self.planes is not None:
            self.planes.set_colormap(name)
        if self.volume is not None and self.volume.visible:
            self.apply_state(canvas)

    def fit(self, canvas, pk):
        frame_box(canvas.view, (0, 0, 0), self._box_size(pk))

    def before_draw(self, canvas) -> None:
        if self.frame is not None:
            self.frame.place(canvas.view, canvas.dpi / canvas.pixel_scale)
        if self.bodies is None or not self.bodies.visible:
            return
        light = headlight(canvas.view.camera)
        if light != self._light:  # only when the camera moved (sets the shading uniforms)
            self._light = light
            self.bodies.shading_filter.light_dir = light


class Particles3DDrawer:
    """3D particles: lit sphere sprites one particle spacing wide; their trails as line segments;
    obstacles as grey surfaces; the domain box outline with axes in metres."""

    label = "host (geometry)"
    # On the interop path the spheres are splatted by CUDA (splat.py) unless this says "sprites"
    # (GL point sprites from registered vertex buffers); the host path always draws GL sprites.
    renderer = "splat"

    def __init__(self):
        self.spheres = None
        self.quad = None
        self.splatter = None
        self._splat_src = None  # (positions, values, event, clim, diameter, centre) of the packet shown
        self._view = self._view_key = None  # the splat's (view matrix, point size, w) and what they were for
        self._canvas = None
        self.frame = None
        self.solids = None
        self.trails = None
        self._trail_counts = None
        self.visuals = ()
        self.path = "undecided"
        self._interops: dict = {}
        self._count = None
        self._solids_key = None
        self.uploads = {"host": 0, "interop": 0}
        self.dev_trails = None
        self.device = device_draw.GeometryUploads()  # the interop path's trails

    def three_d(self, pk):
        return True

    def setup(self, canvas) -> None:
        if self.spheres is None:
            self.spheres = Spheres(canvas.colormap_name)
            canvas.add_visual("spheres3d", self.spheres)
            self.quad = SplatQuad()
            self.quad.prepare = self._prepare_splat
            canvas.add_visual("splat3d", self.quad)
            self._canvas = canvas
            self.solids = scene.visuals.Mesh()
            self.solids.set_gl_state("opaque", depth_test=True, cull_face=False)
            canvas.add_visual("solids3d", self.solids)
            self.trails = scene.visuals.Line(connect="segments", width=1.0, antialias=False)
            self.trails.set_gl_state("translucent", depth_test=True)
            canvas.add_visual("trails3d", self.trails)
            self.dev_trails = device_draw.DeviceLines()  # the interop path's trails (device_draw.py)
            self.dev_trails.visible = False
            canvas.add_visual("trails3d_device", self.dev_trails)
            self.frame = Frame3D(canvas, "particles3d")
        self.visuals = ("spheres3d", *self.frame.names)

    def display_label(self, canvas) -> str:
        return f"{self.path} (CUDA splat)" if self._splat_src is not None else self.path

    def upload(self, canvas, pk: FramePacket) -> None:
        clim = (0.0, 1.0)
        if pk.data is not None:
            clim = canvas.current_range = canvas.colour_range(pk)
        n = int(pk.positions.shape[0])
        canvas._decide_path()
        self.path = canvas.display_path
        lo, hi = self._box(canvas, pk)
        diameter = 2.0 * pk.radius if pk.radius else 0.01 * float(np.max(hi - lo))
        splat = self.path == "interop" and self.renderer == "splat" and pk.data is not None
        self._splat_src = (pk.positions, pk.data, pk.event, clim, diameter, (lo + hi) / 2) if splat else None
        self.quad.visible = splat
        self.spheres.visible = not splat
        if splat:
            for name in ("positions", "values"):
                if name in self._interops:
                    self._interops.pop(name).close()
            self.uploads["interop"] += 1
        elif self.path == "interop" and n == self._count and pk.data is not None:
            self._buffer("positions", self.spheres.positions, canvas, n * 12).upload(pk.positions, pk.event)
            self._buffer("values", self.spheres.values, canvas, n * 4).upload(pk.data, pk.event)
            self.spheres.set_data(None, None, clim)
            self.uploads["interop"] += 1
        else:
            self._drop_interops()
            self._count = None
            canvas.host_copies += pk.backend == "cupy"
            vals = host(pk.data, pk.backend, "particles")
            self.spheres.set_data(host(pk.positions, pk.backend, "particles"),
                                  np.zeros(n, np.float32) if vals is None else vals, clim)
            self._count = n
            self.uploads["host"] += 1
        self.frame.set_box(lo, hi, length_units(pk))
        self.spheres.diameter = diameter
        for name in self.frame.names:
            canvas.visuals[name].visible = canvas.view3d.outline
        key = tuple(pk.solids)
        if key != self._solids_key:
            self._solids_key = key
            if key:
                parts = [box_faces(s_lo, s_hi) for s_lo, s_hi in key]
                verts = np.concatenate([p[0] for p in parts])
                self.solids.set_data(vertices=verts, faces=np.arange(len(verts), dtype=np.uint32).reshape(-1, 3),
                                     vertex_colors=np.concatenate([p[1] for p in parts]))
        self.solids.visible = bool(key) and canvas.show_obstacles
        self._upload_trails(canvas, pk)

    def _upload_trails(self, canvas, pk) -> None:
        trails = getattr(pk, "trails", None)
        pts = None
        half = None if pk.bounds is None else 0.5 * (np.asarray(pk.bounds[1], np.float64)
                                                     - np.asarray(pk.bounds[0], np.float64))
        self.dev_trails.visible = False
        if self.path == "interop" and not self.device.failed and trails is not None and trails.ndim == 3 \
                and trails.shape[0] >= 2 and trails.shape[1]:
            # built on the device into CUDA-registered vertex buffers (device_draw.py): no host copy
            ends = self.device.buffer("trail ends", self.dev_trails.positions, 3, (0, 0, 0))
            colours = self.device.buffer("trail colours", self.dev_trails.colors, 4, (0, 0, 0, 0))

            def build(xp):
                seg, rgba = device_draw.trail_lines(xp, trails, half)
                return [(ends, seg, (0, 0, 0)), (colours, rgba, (0, 0, 0, 0))]

            if self.device.upload(canvas, pk.event, trails, build):
                self.trails.visible = False
                self._trail_counts = None
                self.dev_trails.visible = True
                return
        if trails is not None:
            # On the host path the segments are rebuilt with NumPy every frame (10⁴–10⁵ tracers ×
            # T ≈ 8–16 samples: ~3 ms at 10⁴ × 16, ~35–45 ms at 10⁵ × 16 on one core).
            pts, counts = trail_points(host(trails, pk.backend, "trails"), half)  # wrapped: broken
        if pts is None or not len(pts):
            self.trails.visible = False
            self._trail_counts = None
            return
        if self._trail_counts is not None and np.array_equal(counts, self._trail_counts):
            self.trails.set_data(pts)  # the same segments per age: the colours stay
        else:
            self._trail_counts = counts
            self.trails.set_data(pts, color=trail_colours(counts))
        self.trails.visible = True

    def _box(self, canvas, pk):
        if pk.bounds is not None:
            return tuple(np.asarray(b, np.float64) for b in pk.bounds)
        pts = host(pk.positions, pk.backend, "particle bounds")
        return pts.min(axis=0), pts.max(axis=0)

    def _buffer(self, name, vbo, canvas, nbytes):
        return _registered(self._interops, name, vbo, canvas, lambda h: interop.BufferInterop(h, nbytes))

    def _drop_interops(self) -> None:
        _close_all(self._interops)

    def release_device(self) -> None:
        """Every CUDA registration of this drawer's GL objects released (the canvas closes)."""
        self._drop_interops()
        self.device.close()

    def _prepare_splat(self, quad, view) -> None:
        """Before each draw of the quad (screen or export): splat the shown packet's particles
        with this draw's camera and framebuffer, into the quad's texture (splat.py).

        It runs inside VisPy's draw, where an exception would stop every later visual of every
        frame: a splat that fails (kernel compilation, registration, GPU memory) is logged once and
        the drawer falls back to GL sprites for this canvas."""
        if self._splat_src is None or self._canvas is None:
            return False
        try:
            return self._splat_now(quad, view)
        except Exception as exc:
            log.exception("nagare: CUDA splatting of the particles failed")
            interop.log_once(f"3D particles fall back to GL sprites: the CUDA splat failed ({one_line(exc)})")
            self.renderer = "sprites"  # this canvas' drawer only
            self._splat_src = None
            quad.visible = False
            self.spheres.visible = True
            if "splat" in self._interops:
                self._interops.pop("splat").close()
            self._canvas.refresh()  # the shown packet again, through the sprites
            return False  # not this frame: the texture holds no image

    def _splat_now(self, quad, view) -> bool:
        src, canvas = self._splat_src, self._canvas
        positions, values, event, clim, diameter, centre = src
        x0, y0, width, height = splat.current_viewport(canvas)
        if width < 1 or height < 1:
            return False
        quad.set_origin(x0, y0)
        if quad.texture.shape[:2] != (height, width):
            if "splat" in self._interops:  # a registered texture must not change its storage
                self._interops.pop("splat").close()
            quad.resize_texture(height, width)
            # the texture's commands wait in its own queue until a draw uses it: run them now, so
            # the GL texture exists when it is registered
            canvas.context.glir.associate(quad.texture.glir)
            canvas.context.flush_commands()
        tex = _registered(self._interops, "splat", quad.texture, canvas,
                          lambda h: interop.TextureInterop(h, (height, width, 4)))
        if self.splatter is None:
            self.splatter = splat.CudaSplatter()
        self.splatter.set_colormap(canvas.colormap_name)
        to_render = view.get_transform("visual", "render")
        # the view matrix and the sprites' point scale, mapped again only when a transform changed
        key = transform_key(to_render, canvas.view.camera.transform)
        centre_key = np.asarray(centre, np.float64).tobytes()
        if key is None or (key, centre_key, diameter) != self._view_key:
            size, w = point_scale(canvas.view, view, centre, diameter)
            self._view = (splat.view_matrix(to_render), size, w)
            self._view_key = None if key is None else (key, centre_key, diameter)
        matrix, size, w = self._view
        params = splat.view_params(matrix, width, height, size, w, clim)
        import cupy  # optional dependency (CuPy): splatting runs on the interop path only

        stream = cupy.cuda.ExternalStream(int(tex.stream))
        if event is not None:
            interop._check(tex.rt.cudaStreamWaitEvent(tex.stream, event.ptr, 0), "cudaStreamWaitEvent")
        image, used = self.splatter.render(positions, values, params, stream)
        tex.in_flight.hold((positions, values, used), tex._record_event())  # read by the splat until it has run
        tex.upload(image)
        return True

    def fit(self, canvas, pk):
        lo, hi = self._box(canvas, pk)
        frame_box(canvas.view, lo, hi)

    def before_draw(self, canvas) -> None:
        if self.frame is not None:
            self.frame.place(canvas.view, canvas.dpi / canvas.pixel_scale)
        if self.spheres is None or not self.spheres.visible or self.spheres.count == 0:
            return
        b = self.spheres._bounds
        size, w = point_scale(canvas.view, self.spheres, (b[0] + b[1]) / 2, self.spheres.diameter)
        self.spheres.set_point_scale(size / canvas.pixel_scale, w)  # the screen's framebuffer px → logical px

    def set_colormap(self, canvas, name: str) -> None:
        if self.spheres is not None:
            self.spheres.set_colormap(name)

    def apply_state(self, canvas, pk=None) -> None:
        if self.frame is not None:
            for name in self.frame.names:
                canvas.visuals[name].visible = canvas.view3d.outline


class PerCanvas:
    """A registered drawer whose visuals belong to one canvas: each canvas gets its own instance."""

    def __init__(self, cls):
        self.cls = cls

    def resolve(self, canvas, pk):
        return canvas.own_drawer(self.cls)


def register_drawers() -> None:
    register("draw", "volume3d", PerCanvas(VolumeDrawer))
    register_geometry("volume3d", SlicePlaneGeometry())  # probes on the slice planes

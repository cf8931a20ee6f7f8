"""The VisPy scene in the centre of the window: draws a FramePacket through its kind's Drawer.

Each packet kind has a :class:`Drawer` registered in nagare.app.fieldkinds (role ``draw``, keyed
by the kind string the field type's snapshot handler sets); the canvas itself only switches
visuals and camera when the kind changes. The built-in kinds, registered at the end of this module:

- ``grid2d`` / ``grid3d`` (a slice): a float32 (``r32f``) texture colour-mapped on the GPU through
  the same LUT as the headless PNG writer (nagare.app.colormaps), obstacles as an opaque overlay.
- ``particles``: markers coloured by an attribute; ``boxes``: wireframes (12 edges per box).
- 2D kinds use a pan/zoom camera, 3D particles/boxes a turntable (orbit) camera.
- every 2D kind has axes with units left of and under the field (:mod:`.axes2d`; what they show
  comes from :meth:`Drawer.axes`), the 3D views draw their own box axes.

A new kind registers its own Drawer, adding any visual it needs with :meth:`FieldCanvas.add_visual`.

Uploads happen inside ``on_draw`` (the GL context is current there, also under EGL), through
CUDA–GL interop when :mod:`.interop` allows it, otherwise through a host copy. After VisPy has
drawn the scene, the imgui HUD (if attached) draws on top.
"""
from __future__ import annotations

import logging
from abc import abstractmethod

import numpy as np
from nagare.app import colormaps
from nagare.app.fieldkinds import lookup, register
from nagare.app.fieldkinds.boxes import box_segments
from nagare.app.packets import FramePacket, time_label
from nagare.engine.errors import one_line
from vispy import gloo, scene
from vispy.color import Colormap
from vispy.gloo import gl
from vispy.visuals import Visual
from vispy.visuals.transforms import STTransform

from nagare import shaders

from . import dock, interop, profile1d  # noqa: F401  (profile1d registers the 1-D profiles' drawer)
from .axes2d import Axes2D, AxesSpec, strip_sizes
from .buffer_field import FieldImage
from .buffer_field import register as register_buffer_texture
from .colorbar import ColorBar, Legend, level_legend
from .device_draw import HIDDEN, DeviceLines, GeometryUploads, leaf_lines, point_positions
from .drawer import Drawer, HostBytes, counting_host_bytes, host
from .gl_state import RedundantStateFilter, install_visual_state_skip
from .grid_lod import block_mean, grid_step
from .held_uniforms import HeldUniforms
from .overlay_style import CANVAS_RGB, DOMAIN_RGBA, OVERLAY_HALO_RGBA, OVERLAY_RGBA, overlay_marker, particle_size
from .shared_texture import SharedTexture
from .shared_vertices import FrameFence
from .view3d import LEVEL_COLOURS, Particles3DDrawer, View3DState, level_colours, register_drawers

log = logging.getLogger("nagare")


__all__ = ["Drawer", "FieldCanvas", "LEVEL_COLOURS", "Particles3DDrawer", "box_segments", "host"]


UNLEVELLED_BOXES_RGBA = (0.9, 0.9, 0.9, 0.6)  # boxes without levels
MASK_RGBA = (89, 89, 97, 255)  # obstacles: (0.35, 0.35, 0.38) as in colormaps.apply's mask colour


def vispy_colormap(name: str) -> Colormap:
    return Colormap(colormaps.lut(name))


def _host_scalar(x, what: str = "scalar") -> float:
    if isinstance(x, (int, float, np.generic, np.ndarray)):
        return float(x)
    return float(host(x, "cupy", what))


class ParticleVisual(Visual):
    """Point sprites coloured on the GPU by one attribute (shaders/glsl/particles.*.glsl). The
    sprite's size is in logical px, drawn at the framebuffer's px per logical px (as the tracer
    overlay): HiDPI screens and exports at another size than the screen's show them as on screen."""

    def __init__(self, colormap: str = "viridis"):
        super().__init__(vcode=shaders.source("glsl/particles.vert.glsl"),
                         fcode=shaders.source("glsl/particles.frag.glsl"))
        self._pos = gloo.VertexBuffer(np.zeros((1, 3), np.float32))
        self._val = gloo.VertexBuffer(np.zeros(1, np.float32))
        self._bounds = np.zeros((2, 3))
        self.shared_program["a_position"] = self._pos
        self.shared_program["a_value"] = self._val
        self._uniforms = HeldUniforms(self.shared_program)
        self.size = 6.0
        self._uniforms.set("u_clim", (0.0, 1.0))
        self.set_colormap(colormap)
        self._draw_mode = "points"
        self.set_gl_state("translucent", depth_test=True)

    def set_colormap(self, name: str) -> None:
        lut = (colormaps.lut(name) * 255 + 0.5).astype(np.uint8)[None]  # (1, 256, 3)
        self.shared_program["u_lut"] = gloo.Texture2D(lut, interpolation="linear", wrapping="clamp_to_edge")
        self.update()

    def set_data(self, positions: np.ndarray, values: np.ndarray | None, clim=(0.0, 1.0), size: float = 6.0):
        pos = np.zeros((len(positions), 3), np.float32)
        pos[:, :positions.shape[1]] = positions
        vals = np.zeros(len(pos), np.float32) if values is None else np.asarray(values, np.float32)
        self._pos.set_data(pos)
        self._val.set_data(vals)
        self._bounds = np.stack([pos.min(axis=0), pos.max(axis=0)]) if len(pos) else np.zeros((2, 3))
        self.set_style(clim, size)

    def set_style(self, clim, size: float, bounds=None) -> None:
        """Colour range and sprite size in logical px (and the bounds, when known) of buffers CUDA wrote."""
        if bounds is not None:
            self._bounds = np.asarray(bounds, np.float64)
        self._uniforms.set("u_clim", tuple(float(c) for c in clim))
        self.size = float(size)
        self.update()

    def _prepare_draw(self, view):
        self._uniforms.set("u_size", self.size * float(view.transforms.pixel_scale))

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis, view):
        return self._bounds[0, axis], self._bounds[1, axis]


Particles3D = scene.visuals.create_visual_node(ParticleVisual)


class OverlayVisual(Visual):
    """2D points over a grid field (shaders/glsl/overlay.*.glsl): a light core in a dark ring, so
    they show on every colour map. Unlike VisPy's Markers (which builds a per-point record of size,
    colours and edge on the host for every upload: ~5 ms for 200 000 tracers), an upload here is
    the (n, 2) float32 positions as they are. The sprite's size is in logical px (the canvas sets it
    from overlay_style.overlay_marker), drawn at the framebuffer's px per logical px: HiDPI screens
    and exports at another size than the screen's show the markers as on screen."""

    def __init__(self, color=OVERLAY_RGBA, halo_rgb=OVERLAY_HALO_RGBA[:3]):
        super().__init__(vcode=shaders.source("glsl/overlay.vert.glsl"),
                         fcode=shaders.source("glsl/overlay.frag.glsl"))
        self._pos = gloo.VertexBuffer(np.zeros((1, 2), np.float32))
        self.shared_program["a_position"] = self._pos
        self._uniforms = HeldUniforms(self.shared_program)
        self._halo_rgb = tuple(float(c) for c in halo_rgb)
        self.shared_program["u_color"] = tuple(color)
        self.size = 0.0
        self.set_marker(*overlay_marker(0, 0.0))
        self._draw_mode = "points"
        self.set_gl_state("translucent", depth_test=False)

    def set_data(self, positions: np.ndarray) -> None:
        pos = np.ascontiguousarray(positions, dtype=np.float32)
        self._pos.set_data(pos if len(pos) else np.zeros((1, 2), np.float32))
        self.update()

    def set_marker(self, size: float, core: float, ring_alpha: float) -> None:
        """Diameter in logical px, the core's radius as a fraction of it, the dark ring's opacity.
        A redraw is asked for only when one of them changed: the canvas sets the marker in every
        frame it draws, and an update() there would ask for the next frame, and so on for ever."""
        changed = float(size) != self.size
        self.size = float(size)
        changed |= self._uniforms.set("u_core", float(core))
        changed |= self._uniforms.set("u_halo", (*self._halo_rgb, float(ring_alpha)))
        if changed:
            self.update()

    def _prepare_draw(self, view):
        self._uniforms.set("u_size", self.size * float(view.transforms.pixel_scale))

    def _prepare_transforms(self, view):
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis, view):
        return None  # framed by the grid under it (the camera range is always set explicitly)


Overlay2D = scene.visuals.create_visual_node(OverlayVisual)


GL_DEPTH_COMPONENT24 = 0x81A6


class FieldCanvas(scene.SceneCanvas):
    """The field view, with a colour bar column at its right, axes left of and under a 2D field, and
    room for the HUD at its left.

    The layout (:meth:`relayout`) is explicit: the field's ViewBox gets the canvas minus the HUD's
    column (or its title strip when collapsed), the colour bar's column and the axis strips, so
    none covers the field. ``colorbar=False, axes=False`` leave the whole canvas to the field
    (pixel tests use it)."""

    def __init__(self, size=(900, 700), colorbar: bool = True, axes: bool = True, **kwargs):
        super().__init__(keys=None, size=size, bgcolor=(*CANVAS_RGB, 1), **kwargs)
        self.unfreeze()
        install_visual_state_skip()  # visuals leave out state GL has (gl_state.py)
        # border_width=0: a ViewBox clips its scene to ``inner_rect``, which VisPy insets by the
        # border width (1 px by default) while the camera maps its rect onto the full widget rect;
        # the outermost pixel ring of the view would show the background instead of the field.
        # Placed by relayout() (not the central widget, which would stretch it over the canvas).
        self.view = scene.widgets.ViewBox(parent=self.scene, border_width=0)
        self.colorbar = ColorBar(self.scene)
        self.colorbar_on = colorbar
        self.colorbar_in_exports = True
        # exports show the scene as framed on screen: the HUD's column (or title strip) is left
        # out unless this asks for the HUD drawn in, as on screen
        self.hud_in_exports = False
        self._colorbar_wanted = False  # the shown kind has a colour range or a legend
        self.legend_levels: list[int] | None = None  # octree levels on screen (their legend)
        self.legend: Legend | None = None  # any other legend a drawer sets in upload() (a profile's curves)
        self.axes = Axes2D(self.scene)
        self.axes_on = axes
        self._axes_spec: AxesSpec | None = None  # what the shown 2D kind's axes say (None: a 3D view)
        self.view3d = View3DState()
        self._drawer = None
        self._own: dict = {}  # drawers with per-canvas visuals (view3d), by class
        self.probe = None  # set by nagare.app.gui.probe.Probes
        self.view.camera = scene.PanZoomCamera(aspect=1)
        self.colormap_name = "viridis"
        self.fixed_range: tuple[float, float] | None = None
        self.show_obstacles = True
        can_sample_buffers = register_buffer_texture(self)
        self.image = self._new_field_image()
        # uint8 RGBA stored as is (texture_format "auto": no scaling on the CPU), uploaded only when
        # the packet carries another mask object than the one shown (the worker reuses its copy)
        self.mask_image = scene.visuals.Image(np.zeros((2, 2, 4), np.uint8), texture_format="auto",
                                              parent=self.view.scene)
        # Drawn after the field, blended, without depth test: both lie in the z = 0 plane.
        self.mask_image.order = 1
        self.mask_image.set_gl_state("translucent", depth_test=False)
        self.markers = Particles3D(parent=self.view.scene)
        self.overlay = Overlay2D(parent=self.view.scene)
        self.overlay.order = 2
        self.lines = scene.visuals.Line(connect="segments", color=(0.9, 0.9, 0.9, 0.6), parent=self.view.scene)
        self.lines_device = DeviceLines(parent=self.view.scene)  # the boxes from the device (interop path)
        self.domain = scene.visuals.Line(connect="segments", color=DOMAIN_RGBA, parent=self.view.scene)
        for v in (self.markers, self.lines, self.lines_device, self.domain, self.mask_image, self.overlay):
            v.visible = False
        # every visual a Drawer may show, by name; hidden together when the packet kind changes
        self.visuals = {"image": self.image, "mask_image": self.mask_image, "markers": self.markers,
                        "overlay": self.overlay, "lines": self.lines, "lines_device": self.lines_device,
                        "domain": self.domain}
        self.hud = None
        self.dock_origin = (0.0, 0.0)  # (left, top) where relayout began the field: right of the HUD or under it
        self.layout_held = False  # hold_layout: dock_origin kept (a video's frames keep one size)
        self.backend = "numpy"
        self.display_path = "undecided"
        self._fit = False
        self.display_label = "—"
        self.path_reason = ""
        self._interop: interop.TextureInterop | SharedTexture | None = None
        # grids through buffers CUDA and GL share (no map/unmap a frame); off after a failure
        self.shared_uploads = True
        # with them, the field image samples the shared buffer itself: no texture write a frame
        # (buffer_field.py); off: GL copies the buffer into the texture (the earlier path)
        self.buffer_sampling = can_sample_buffers
        self._pending: FramePacket | None = None
        self.shown: FramePacket | None = None
        self.current_range = (0.0, 1.0)
        self._kind = None
        self._image_shape = None  # the field texture's shape (the field's, or its block means')
        self._field_shape = None  # the shown 2D field's shape
        self._image_scale = None  # (spacing, k) the image's transform was set for
        self._grid_k = 1  # the texture holds k×k block means of the field (grid_lod.py)
        self.grid_lod = True
        self._lod_stream = None
        self._lod_reads = interop.InFlight()  # fields the block means may still read
        self._mask_key = None
        self._spacing = None
        self._overlay_count = 0  # rows of the tracers on screen (their marker's size rule)
        self.frames_drawn = 0
        self.host_copies = 0
        # every device→host byte the display copies (uploads, draws, the time label): 0 a frame on
        # the interop path once a shape's first frame is drawn (bench_display reports it per frame)
        self.host_bytes = HostBytes()
        self.device_geometry = GeometryUploads()  # 2D tracers, particles and boxes on the interop path
        self.frame_fence = FrameFence()  # after each frame: when GL is done reading shared vertex buffers
        self.shared_vertex_uploads = True  # device geometry through memory CUDA and GL share; off after a failure
        self._boxes_key = None  # the packet's lo array the device boxes were built from
        self._boxes_legend = None
        self.freeze()
        self.events.resize.connect(lambda ev: self.relayout())
        # VisPy emits close before its backend destroys the GL context: the last moment CUDA can
        # unregister this canvas' buffers and textures against a context that still exists
        self.events.close.connect(lambda ev: self.release_device())
        self.relayout()

    # ---- layout ------------------------------------------------------------------------
    def relayout(self) -> None:
        """Place the field view right of the docked HUD or under it (dock.field_origin: whichever
        shows it larger) and left of the colour bar column."""
        w, h = self.size
        lw, bh = strip_sizes(self.dpi)
        hud = self.hud.footprint() if self.hud is not None and self.hud.visible else None
        cb = self.colorbar_on and self._colorbar_wanted
        bar_w = self.colorbar.width(self.dpi)
        strips = (lw, bh) if self.axes_on and self._axes_spec is not None else (0, 0)
        right = bar_w if cb and w > 2 * bar_w else 0
        if not self.layout_held:
            self.dock_origin = dock.field_origin((w, h), hud, self._content_aspect(), right, strips)
        left, top = self.dock_origin
        if right and w - left <= 2 * bar_w:  # right of the HUD in a narrow canvas: no room for the bar
            right = 0
        vw, vh = max(w - left - right, 1), max(h - top, 1)
        col_top, col_h = top, vh  # the colour bar's column is full height: the x axis is under the field only
        # a field squeezed to a few times the strips' size keeps its pixels: axes only with room for both
        axes = self.axes_on and self._axes_spec is not None and vw > 3 * lw and vh > 3 * bh
        if axes:
            left, vw, vh = left + lw, vw - lw, vh - bh
        if tuple(self.view.pos) != (left, top) or tuple(self.view.size) != (vw, vh):
            self.view.pos = (left, top)
            self.view.size = (vw, vh)
        self.axes.visible = axes
        if axes:
            self.axes.place((left, top), (vw, vh), self.dpi)
        self.colorbar.visible = bool(right)
        if right:
            self.colorbar.view.pos = (w - right, col_top)
            self.colorbar.view.size = (right, col_h)
            self.colorbar.resize(right, col_h, self.dpi)
        self.update()

    def hold_layout(self, on: bool) -> None:
        """Keep the field where it is (right of the HUD or under it) while on: a video's frames are the
        export region's size, which a HUD growing or shrinking would change (VideoRecorder crops or
        pads each frame to the first's). Meanwhile a HUD that grows may cover the field's top on
        screen, never in the frames (they are drawn without it)."""
        self.layout_held = bool(on)
        if not on:
            self.relayout()

    def _content_aspect(self) -> float | None:
        """Width / height of what the view frames: a 2D camera's range as fitted or zoomed (not the
        part its aspect lock adds), 1 for a 3D view; None where the camera keeps no aspect (a
        profile's plot stretches to any region: dock.field_origin then takes the larger area)."""
        cam = self.view.camera
        if isinstance(cam, scene.PanZoomCamera):
            if cam.aspect is None:
                return None
            r = cam.rect
            if r.width > 0 and r.height > 0:
                return float(r.width / r.height)
        return 1.0

    def field_rect(self) -> tuple[int, int, int, int]:
        """(x, y, w, h) of the field view in physical pixels, y from the top."""
        s = self.pixel_scale
        (x, y), (w, h) = self.view.pos, self.view.size
        return int(round(x * s)), int(round(y * s)), int(round(w * s)), int(round(h * s))

    def set_colorbar(self, on: bool) -> None:
        self.colorbar_on = on
        self.relayout()

    def _update_colorbar(self, pk: FramePacket) -> None:
        ranged = pk.kind in ("grid2d", "grid3d", "volume3d") or (pk.kind == "particles" and pk.data is not None)
        legend = self.legend
        if legend is None and self.legend_levels:
            legend = level_legend(self.legend_levels, level_colours(self.legend_levels))
        wanted = ranged or legend is not None
        self.colorbar.show_bar = ranged
        if ranged:
            lo, hi = self.current_range
            self.colorbar.set(lo, hi, pk.label or pk.attribute or pk.field_name, pk.units)
        width = self.colorbar.width(self.dpi)
        self.colorbar.set_legend(legend)
        if wanted != self._colorbar_wanted or width != self.colorbar.width(self.dpi):
            self._colorbar_wanted = wanted
            self.relayout()

    def clear_scene(self) -> None:
        """Show nothing until the next packet (a preset being replaced: its picture must not stay
        up, recoloured with the new map, while the new engine is built)."""
        self._pending = None
        self.shown = None
        self._drawer = None
        self._kind = None  # the next packet sets its kind up again and is framed
        self._field_shape = None
        for v in self.visuals.values():
            v.visible = False
        self.legend_levels = self.legend = None
        self._axes_spec = self.axes.spec = None
        self._colorbar_wanted = False
        self.relayout()

    def own_drawer(self, cls):
        """This canvas' instance of a drawer class that keeps visuals of its own."""
        d = self._own.get(cls)
        if d is None:
            d = self._own[cls] = cls()
        return d

    # ---- 3D views ---------------------------------------------------------------------------
    def set_view3d(self, **kw) -> None:
        """Change the 3D view state (planes ``{"x": [on, frac]}``, volume, window, outline, boxes)
        and redraw what is on screen without a new packet."""
        for k, v in kw.items():
            if k == "planes":
                for axis, pv in v.items():
                    self.view3d.planes[axis] = list(pv)
            else:
                setattr(self.view3d, k, v)
        d = self._drawer
        if d is not None and hasattr(d, "apply_state") and self.shown is not None:
            if "boxes" in kw:
                self.refresh()
            else:
                d.apply_state(self)
        self.update()

    def reset_camera(self) -> None:
        """Frame the shown data again (key Home, View ▸ Reset camera)."""
        if self.shown is not None and self._drawer is not None:
            if isinstance(self.view.camera, scene.TurntableCamera):
                self.view.camera.elevation, self.view.camera.azimuth = 30.0, 30.0
            self._drawer.fit(self, self.shown)
            self.relayout()

    # ---- configuration -----------------------------------------------------------------
    def set_colormap(self, name: str) -> None:
        self.colormap_name = name
        self.image.cmap = vispy_colormap(name)
        self.markers.set_colormap(name)
        self.colorbar.set_colormap(name)
        for d in self._own.values():
            d.set_colormap(self, name)
        if self.shown is not None and self.shown.symmetric:
            self.refresh()  # its range is symmetric about 0 in a diverging map only (colormaps.view_range)
        else:
            self.update()

    def set_range(self, rng: tuple[float, float] | None) -> None:
        self.fixed_range = rng
        self.refresh()

    def set_show_obstacles(self, on: bool) -> None:
        self.show_obstacles = on
        self._mask_key = None  # upload the mask texture again when it is shown again
        self.refresh()

    def refresh(self) -> None:
        """Draw the packet on screen again (after a change of how it is shown)."""
        if self.shown is not None:
            self._pending = self._pending or self.shown
        self.update()

    def _new_field_image(self) -> FieldImage:
        image = FieldImage(np.zeros((2, 2), np.float32), texture_format="r32f",
                           cmap=vispy_colormap(self.colormap_name), clim=(0, 1),
                           interpolation="nearest", parent=self.view.scene)
        image.set_gl_state(depth_test=False)
        return image

    def _replace_field_image(self) -> None:
        """A new field image in place of one whose program failed to build (VisPy cannot relink a
        program after a failed compile): the next upload gives it data, range and scale."""
        old, self.image = self.image, self._new_field_image()
        self.image.visible = old.visible
        old.parent = None
        self.visuals["image"] = self.image
        self._image_shape = self._image_scale = None

    def add_visual(self, name: str, node) -> None:
        """Add a scene visual a registered Drawer shows by ``name`` (hidden until its kind is on screen)."""
        if name in self.visuals:
            raise ValueError(f"the canvas already has a visual {name!r}")
        node.parent = self.view.scene
        node.visible = False
        self.visuals[name] = node

    def set_backend(self, backend: str) -> None:
        if backend != self.backend:
            self.backend = backend
            self._drop_interop()
            self.display_path = "undecided"

    # ---- frames ------------------------------------------------------------------------
    def show_packet(self, packet: FramePacket) -> None:
        """Queue a packet; it is uploaded at the next draw (the UI never waits for the GPU)."""
        self._pending = packet
        self.update()

    def prepare(self) -> None:
        """Upload the pending packet if its snapshot is complete (GL context must be current)."""
        self._check_grid_step()
        pk = self._pending
        if pk is not None and pk.ready():
            self._pending = None
            try:
                with counting_host_bytes(self.host_bytes):
                    self._upload(pk)
            except Exception:
                log.exception("nagare: cannot draw frame %s", pk.seq)
        if self.overlay.visible:
            # after the upload (a first packet fits the camera only after its overlay is in) and in
            # every frame or export (the marker follows the zoom)
            self._size_overlay()

    def draw_now(self, finish: bool = False) -> None:
        """Draw a frame immediately on any VisPy backend (Qt, EGL); optionally wait for GL."""
        self.set_current()
        self.on_draw(None)
        if finish:
            gl.glFinish()

    def gl_state(self) -> RedundantStateFilter:
        """The filter of repeated GL state in front of this canvas' GLIR parser (gl_state.py)."""
        return RedundantStateFilter.install(self.context.shared.parser)

    def on_draw(self, event):
        try:
            self._draw_frame(event)
        finally:
            # sent with this frame's work, even a frame that failed part-way (its draws may read
            # shared vertex buffers): the next write into one waits for it
            self.frame_fence.mark()

    def _draw_frame(self, event):
        self.gl_state().forget()  # Qt and the HUD made GL calls of their own since the last frame
        self.prepare()
        if self._drawer is not None and hasattr(self._drawer, "before_draw"):
            self._drawer.before_draw(self)
        self.axes.update(self.view, self.dpi)  # the ticks follow this frame's pan and zoom
        try:
            super().on_draw(event)
        except Exception as exc:
            if not self.image.samples_buffer:
                raise
            # the field's buffer-texture shader or glTexBuffer failed on this GL: the texture
            # route from now on (shared buffers copied into it), said once; the shown frame again
            interop.log_once(f"display: drawing the field from its buffer failed ({one_line(exc)}); "
                             f"copying it into the texture instead")
            self.buffer_sampling = False
            self._drop_interop()
            self._replace_field_image()  # the next upload fills the new one's texture from the host
            self._pending = self._pending or self.shown
        if self.hud is not None and self.hud.visible:
            self.context.flush_commands()
            self.hud.render(self.physical_size, self.pixel_scale, self.gl_state().known)
            self.gl_state().forget()  # imgui sets GL state directly, not through VisPy
        self.frames_drawn += 1

    def shown_time(self) -> str:
        """The simulated time of the frame on screen ("t = 0.25 s"), "" before the first one
        (its event is done: a device time is read on a private stream, no wait)."""
        pk = self.shown
        if pk is None or pk.time is None:
            return ""
        with counting_host_bytes(self.host_bytes):
            return time_label(_host_scalar(pk.time, "time"), pk.time_units)

    def shown_step(self) -> int | None:
        """The step of the frame on screen (the one shown_time stamps), None before the first one."""
        pk = self.shown
        return None if pk is None or pk.step is None else int(pk.step)

    def colour_range(self, pk: FramePacket) -> tuple[float, float]:
        """The colour range of a packet: the fixed one, else the packet's (device) auto range."""
        if self.fixed_range is not None:
            return self.fixed_range
        if pk.vmin is None:
            return 0.0, 1.0
        lo, hi = _host_scalar(pk.vmin, "colour range"), _host_scalar(pk.vmax, "colour range")  # event done
        lo, hi = colormaps.view_range(lo, hi, self.colormap_name, pk.symmetric)
        if not hi > lo:
            hi = lo + (abs(lo) * 1e-6 or 1.0)
        return lo, hi

    def _set_kind(self, pk: FramePacket, drawer: Drawer) -> None:
        three_d = drawer.three_d(pk)
        kind = (pk.kind, three_d)
        if kind == self._kind:
            return
        self._kind = kind
        drawer.setup(self)
        for v in self.visuals.values():
            v.visible = False
        for name in drawer.visuals:
            self.visuals[name].visible = True
        # depth_value: VisPy's turntable puts its near and far planes at focal distance / sqrt(10·d)
        # and × sqrt(10·d); its default d = 10⁶ (/3162, ×3162) left a framed box a few thousand steps
        # of a 24-bit depth buffer, sprites a particle apart could tie. 10⁴ (/316, ×316) gives it 100×
        # more and still lets one zoom in some 300× before the far side of the box is clipped.
        self.view.camera = (scene.TurntableCamera(fov=45, elevation=30.0, azimuth=30.0) if three_d
                            else scene.PanZoomCamera(aspect=drawer.aspect))
        if three_d:
            self.view.camera.depth_value = 1e4
        self._image_shape = None
        self._field_shape = None
        self._image_scale = None
        self._fit = True

    def _upload(self, pk: FramePacket) -> None:
        drawer = lookup("draw", pk.kind)
        resolve = getattr(drawer, "resolve", None)
        if resolve is not None:
            drawer = resolve(self, pk)
        self._set_kind(pk, drawer)
        self._drawer = drawer
        self.legend_levels = self.legend = None
        drawer.upload(self, pk)
        self.shown = pk
        self.display_label = drawer.display_label(self)  # what the status bar reports
        spec = drawer.axes(pk) if hasattr(drawer, "axes") else None  # the 3D drawers are no Drawer subclass
        if spec != self._axes_spec:
            had = self._axes_spec is not None
            self._axes_spec = self.axes.spec = spec
            if had != (spec is not None):
                self.relayout()  # the strips come or go: before the camera is fitted
        self._update_colorbar(pk)  # may change the layout: before the camera is fitted
        if self._fit:
            self._fit = False
            drawer.fit(self, pk)
            self.relayout()  # the framed content's aspect chooses right of the HUD or under it
        if self.probe is not None:
            self.probe.on_packet(pk)

    def fit_bounds(self, lo, hi) -> None:
        """Frame the box lo..hi with the current camera (explicit ranges: VisPy's auto bounds trip
        over empty visuals)."""
        if isinstance(self.view.camera, scene.TurntableCamera):
            self.view.camera.center = tuple((lo + hi) / 2)
            self.view.camera.scale_factor = float(np.max(hi - lo)) * 1.2 or 1.0
        else:
            self.view.camera.set_range(x=(lo[0], hi[0]), y=(lo[1], hi[1]), margin=0.05)

    def _decide_path(self) -> None:
        if self.display_path != "undecided":
            return
        vendor = f"{gl.glGetParameter(gl.GL_VENDOR)} {gl.glGetParameter(gl.GL_RENDERER)}"
        rt, reason = interop.cuda_python_runtime()
        self.display_path, self.path_reason = interop.choose_path(self.backend, vendor, rt is not None, reason)
        if self.display_path == "host" and self.backend == "cupy":
            interop.log_once(f"display falls back to a host copy: {self.path_reason}")

    def _gl_texture_handle(self) -> int:
        tex = self.image._texture
        return int(self.context.shared.parser._objects[tex.id].handle)

    # ---- the built-in kinds' uploads (their Drawers below call these) -----------------------
    def _upload_grid(self, pk: FramePacket) -> None:
        lo, hi = self.colour_range(pk)
        self.current_range = (lo, hi)
        self.image.clim = (lo, hi)
        shape = tuple(pk.data.shape)
        self._decide_path()
        if shape != self._field_shape:  # a new field: framed after this upload, at full resolution
            self._field_shape = shape
            self._fit = True
        if pk.spacing != self._spacing:
            # Only on change: a new transform object makes VisPy regenerate and relink the
            # visuals' shader programs (tens of ms per frame on NVIDIA's GLSL compiler).
            self._spacing = pk.spacing
            self.mask_image.transform = STTransform(scale=(pk.spacing, pk.spacing))  # cell (i, j): [i, i+1)·spacing
        # The texture: every cell, or k×k block means when the view shows k ≥ 2 cells a pixel (grid_lod.py).
        k = 1 if self._fit else self._wanted_grid_step(pk)
        data, event = pk.data, pk.event
        if k > 1:
            try:
                data, event = self._block_means(pk, k)
            except Exception as exc:  # e.g. out of GPU memory: every cell from now on, said once
                interop.log_once(f"display: cannot reduce the field to the screen's resolution "
                                 f"({one_line(exc)}); uploading every cell")
                self.grid_lod, k = False, 1
        self._grid_k = k
        tex_shape = tuple(data.shape)
        if self.display_path == "interop" and self._image_shape == tex_shape:
            # The texture of this shape exists (drawn once): write it from the device directly.
            self._upload_interop(data, event, tex_shape)
        else:
            # First frame of a shape (VisPy allocates the texture) or the host path.
            self._drop_interop()
            self.host_copies += pk.backend == "cupy"
            if event is not pk.event:
                interop.poll_until_done(event, 1e-4)  # block means on their own stream; host() copies on another
            self.image.set_data(host(data, pk.backend, "field"))
            self._image_shape = tex_shape
        if (pk.spacing, k) != self._image_scale:
            self._image_scale = (pk.spacing, k)
            if isinstance(self.image.transform, STTransform):
                self.image.transform.scale = (pk.spacing * k, pk.spacing * k)  # in place: no program rebuild
            else:
                self.image.transform = STTransform(scale=(pk.spacing * k, pk.spacing * k))
        self._upload_mask(pk)
        self._upload_overlay(pk)

    def _from_device(self, pk: FramePacket) -> bool:
        """Geometry (tracers, particles) goes into CUDA-registered vertex buffers, not through the host
        (unless that failed once on this canvas: device_draw.GeometryUploads.upload)."""
        return self.display_path == "interop" and pk.backend == "cupy" and not self.device_geometry.failed

    def _upload_overlay(self, pk: FramePacket) -> None:
        if pk.overlay is None:
            self.overlay.visible = False
            return
        if not (self._from_device(pk) and pk.overlay.shape[0] and self._upload_overlay_device(pk)):
            self.device_geometry.drop("tracers")  # the host writes that GL buffer now
            self.overlay.set_data(host(pk.overlay, pk.backend, "tracers"))
        self._overlay_count = int(pk.overlay.shape[0])  # rows, not a device read: the same on both paths
        self.overlay.visible = True  # its marker is sized in prepare(), once the camera is fitted

    def _size_overlay(self) -> None:
        """The tracers' marker for their number over the field's area on screen now (a zoom out
        crowds them: smaller markers), by overlay_style.overlay_marker."""
        if self._field_shape is None or self._spacing is None or len(self._field_shape) != 2:
            return
        ny, nx = self._field_shape
        world = np.array([[0.0, 0.0], [nx * self._spacing, ny * self._spacing]])
        (x0, y0), (x1, y1) = self.view.scene.node_transform(self.view).map(world)[:, :2]
        self.overlay.set_marker(*overlay_marker(self._overlay_count, abs((x1 - x0) * (y1 - y0))))

    def _upload_overlay_device(self, pk: FramePacket) -> bool:
        pos = pk.overlay
        buf = self.device_geometry.buffer("tracers", self.overlay._pos, 2, (HIDDEN, 0))
        return self.device_geometry.upload(self, pk.event, pos,
                                           lambda xp: [(buf, point_positions(xp, pos, 2), (HIDDEN, 0))])

    def _upload_mask(self, pk: FramePacket) -> None:
        if pk.mask is None or not self.show_obstacles:
            self.mask_image.visible = False
            return
        self.mask_image.visible = True
        # The worker hands out the same mask copy while the engine's mask is unchanged; holding the
        # object (not its id) here means an id can never be reused by a different mask.
        if self._mask_key is not None and self._mask_key[0] is pk.mask and self._mask_key[1] == pk.data.shape:
            return
        self._mask_key = (pk.mask, pk.data.shape)
        m = host(pk.mask, pk.backend, "mask")
        rgba = np.zeros(m.shape + (4,), np.uint8)
        rgba[m] = MASK_RGBA
        self.mask_image.set_data(rgba)

    def _upload_particles(self, pk: FramePacket) -> None:
        clim = (0.0, 1.0)
        if pk.data is not None:
            clim = self.current_range = self.colour_range(pk)
        n = int(pk.positions.shape[0])
        size = particle_size(n)  # logical px (the visual draws it at the framebuffer's scale)
        self._decide_path()
        if not (self._from_device(pk) and n and self._upload_particles_device(pk, clim, size)):
            self.device_geometry.drop("particles", "particle values")  # the host writes those GL buffers now
            self.host_copies += pk.backend == "cupy"
            pos = host(pk.positions, pk.backend, "particles")
            self.markers.set_data(pos, host(pk.data, pk.backend, "particles"), clim, size)
        if pk.bounds is not None:
            lo, hi = (np.asarray(b, np.float32)[None] for b in pk.bounds)
            self.domain.set_data(box_segments(lo, hi))
            self.domain.visible = True

    def _upload_particles_device(self, pk: FramePacket, clim, size: float) -> bool:
        """2D particles: positions (z = 0) and the colouring attribute built on the device and
        copied into the sprites' CUDA-registered vertex buffers. False where that failed."""
        positions, values = pk.positions, pk.data
        pos_buf = self.device_geometry.buffer("particles", self.markers._pos, 3, (HIDDEN, 0, 0))
        val_buf = self.device_geometry.buffer("particle values", self.markers._val, 1, (0,))

        def build(xp):
            vals = (xp.zeros(positions.shape[0], xp.float32) if values is None
                    else xp.asarray(values, dtype=xp.float32))
            return [(pos_buf, point_positions(xp, positions, 3), (HIDDEN, 0, 0)),
                    (val_buf, vals.reshape(-1, 1), (0,))]

        if not self.device_geometry.upload(self, pk.event, (positions, values), build):
            return False
        bounds = None
        if pk.bounds is not None:
            lo, hi = (np.zeros(3) for _ in range(2))
            lo[:2], hi[:2] = np.asarray(pk.bounds[0], np.float64)[:2], np.asarray(pk.bounds[1], np.float64)[:2]
            bounds = np.stack([lo, hi])
        self.markers.set_style(clim, size, bounds)
        return True

    def _upload_boxes(self, pk: FramePacket) -> None:
        """One line visual for every leaf's 12 edges, coloured by level (legend in the colour bar)."""
        self._decide_path()
        device = self._from_device(pk) and pk.lo.shape[0] > 0 and self._upload_boxes_device(pk)
        self.lines.visible, self.lines_device.visible = not device, device
        if device:
            return
        self._boxes_key = None
        self.device_geometry.drop("box ends", "box colours")
        lo, hi = host(pk.lo, pk.backend, "boxes"), host(pk.hi, pk.backend, "boxes")
        if pk.level is None:
            self.lines.set_data(box_segments(lo, hi), color=UNLEVELLED_BOXES_RGBA)
            return
        level = host(pk.level, pk.backend, "boxes")
        self.legend_levels = sorted(int(v) for v in np.unique(level))
        self.lines.set_data(box_segments(lo, hi), color=np.repeat(level_colours(level), 24, axis=0))

    def _upload_boxes_device(self, pk: FramePacket) -> bool:
        """The boxes' lines built on the device, again only when the packet carries other arrays
        (the worker hands out one copy per engine Boxes). False where the device upload failed."""
        if pk.lo is not self._boxes_key:
            lo, hi, level = pk.lo, pk.hi, pk.level
            levels = pk.boxes_levels
            if level is not None and levels is None:  # not said by the engine: read once per new boxes
                levels = np.unique(host(level, pk.backend, "box levels")).tolist()
            ends = self.device_geometry.buffer("box ends", self.lines_device.positions, 3, (0, 0, 0))
            colours = self.device_geometry.buffer("box colours", self.lines_device.colors, 4, (0, 0, 0, 0))

            def build(xp):
                seg, rgba = leaf_lines(xp, lo, hi, level)
                if level is None:  # one colour, as the host path draws them
                    rgba = xp.empty_like(rgba)
                    for c, v in enumerate(UNLEVELLED_BOXES_RGBA):
                        rgba[:, c] = v
                seg3 = xp.zeros((seg.shape[0], 3), xp.float32)
                seg3[:, :seg.shape[1]] = seg  # 2D boxes lie in z = 0
                return [(ends, seg3, (0, 0, 0)), (colours, rgba, (0, 0, 0, 0))]

            if not self.device_geometry.upload(self, pk.event, (lo, hi, level), build):
                return False
            self._boxes_key = pk.lo  # only now: a failed upload is not taken for a built one
            self._boxes_legend = None if level is None else sorted(int(v) for v in levels)
        self.legend_levels = self._boxes_legend
        return True

    def _wanted_grid_step(self, pk: FramePacket) -> int:
        """k of the texture for this view: the cells per pixel it shows, ≥ 1 (grid_lod.py);
        1 for host fields, with grid_lod off, or under a camera other than the 2D one."""
        if not self.grid_lod or isinstance(pk.data, np.ndarray) or pk.backend != "cupy":
            return 1
        if not isinstance(self.view.camera, scene.PanZoomCamera) or pk.data.ndim != 2:
            return 1
        rect = self.view.camera.rect
        _, _, w, h = self.field_rect()
        return grid_step(rect.width, rect.height, w, h, pk.spacing)

    def _block_means(self, pk: FramePacket, k: int):
        """(k×k block means of the packet's field, an event after them), on a stream of the
        canvas' own that first waits for the packet's snapshot."""
        import cupy as cp  # optional dependency (CuPy): only a CuPy field comes here

        if self._lod_stream is None:
            self._lod_stream = cp.cuda.Stream(non_blocking=True)
        stream = self._lod_stream
        if pk.event is not None:
            stream.wait_event(pk.event)
        with stream:
            small = block_mean(pk.data, k)
            done = cp.cuda.Event(block=False, disable_timing=True)
            done.record(stream)
        # The field is read on this stream after the host has moved on: keep it until then (a
        # packet dropped meanwhile would hand its memory back to CuPy's pool, see interop.py).
        self._lod_reads.release_done()
        self._lod_reads.hold(pk.data, done)
        return small, done

    def _check_grid_step(self) -> None:
        """A zoom that changes the texture's k redraws the shown field at the new k, also when
        no new packet comes (a paused run)."""
        pk = self.shown
        if (self._pending is None and pk is not None and pk.kind in ("grid2d", "grid3d")
                and self._field_shape is not None and not self._fit
                and self._wanted_grid_step(pk) != self._grid_k):
            self._pending = pk

    def _upload_interop(self, data, event, shape) -> None:
        """The field into the image's texture from the device: through buffers CUDA and GL share
        (shared_texture.py: no map/unmap a frame) where the driver offers it, else by mapping the
        registered texture for each copy (interop.py)."""
        interop.plan_copy(data.shape, data.dtype, data.strides, shape)  # a data error is no buffer failure
        if self._interop is None:
            self._interop = self._new_interop(shape)
        try:
            self._interop.upload(data, event)
        except Exception as exc:
            if not isinstance(self._interop, SharedTexture):
                raise
            interop.log_once(f"display: shared display buffers failed ({one_line(exc)}); "
                             f"mapping the texture for each frame instead")
            self.shared_uploads = False
            self._drop_interop()
            self._interop = self._new_interop(shape)
            self._interop.upload(data, event)

    def _new_interop(self, shape):
        handle = self._gl_texture_handle()
        if self.shared_uploads:
            try:
                return SharedTexture(handle, shape, image=self.image if self.buffer_sampling else None)
            except Exception as exc:
                interop.log_once(f"display: no shared display buffers ({one_line(exc)}); "
                                 f"mapping the texture for each frame instead")
                self.shared_uploads = False
        return interop.TextureInterop(handle, shape)

    def _drop_interop(self) -> None:
        if self._interop is not None:
            self._interop.close()
            self._interop = None

    def release_device(self) -> None:
        """Unregister every CUDA–GL registration of this canvas and its drawers (the field's, the
        device geometry's, the 3D views'), with this canvas' GL context current."""
        self.set_current()
        self._drop_interop()
        self.device_geometry.close()
        for d in self._own.values():
            d.release_device()
        self.frame_fence.close()

    # ---- export ------------------------------------------------------------------------
    def render(self, region=None, size=None, bgcolor=None, crop=None, alpha=True, hud: bool = False):
        """VisPy's SceneCanvas.render with a 24-bit depth buffer (VisPy allocates 16 bits, which put
        3D sprites and surfaces a few depth steps apart in the wrong order in exported frames);
        ``hud``: the HUD drawn over the scene as on screen (the whole canvas only)."""
        self.set_current()
        offset = (0, 0) if region is None else region[:2]
        csize = self.size if region is None else region[2:]
        s = self.pixel_scale
        size = tuple(int(x * s) for x in csize) if size is None else size
        fbo = gloo.FrameBuffer(color=gloo.RenderBuffer(size[::-1]),
                               depth=gloo.RenderBuffer(size[::-1], format=GL_DEPTH_COMPONENT24))
        self.push_fbo(fbo, offset, csize)
        state = self.gl_state()
        state.forget()
        try:
            self._draw_scene(bgcolor=bgcolor)
            if hud and region is None and self.hud is not None and self.hud.visible:
                self.context.flush_commands()  # the fbo bound before imgui's raw GL calls
                self.hud.render(size, size[0] / csize[0], state.known)  # framebuffer px per logical px
            result = fbo.read(crop=crop)
        finally:
            state.forget()
            self.pop_fbo()
        return result if alpha else result[..., :3]

    def _update_transforms(self):
        """VisPy's mapping of the canvas onto a framebuffer pushed by :meth:`render`, made right for an
        image of another size than the region's: VisPy maps the region onto the framebuffer's
        *logical* size (the region's own), while the viewport covers the framebuffer's pixels, so a
        larger image showed the scene in its lower left part and a smaller one a corner of it. Here
        the region (logical px, y down) maps onto every pixel of the framebuffer."""
        if not self._fb_stack:
            return super()._update_transforms()
        fbo, offset, csize = self._fb_stack[-1]
        h, w = fbo.color_buffer.shape[:2]
        s = self.pixel_scale
        ph = self.physical_size[1]
        # the region in the canvas' framebuffer pixels, whose y runs up from the bottom
        rect = (offset[0] * s, ph - (offset[1] + csize[1]) * s, csize[0] * s, csize[1] * s)
        viewport = self._vp_stack[-1] if self._vp_stack else None
        self.transforms.configure(viewport=viewport, fbo_size=(w, h), fbo_rect=rect)

    def export_region(self) -> tuple[int, int, int, int] | None:
        """(x, y, w, h) in logical px of what a PNG or MP4 frame shows: the canvas right of the docked
        HUD or under it (wherever relayout put the field), so the scene fills the image as the
        user framed it; None (the whole canvas) with ``hud_in_exports`` or no HUD on screen."""
        if self.hud is None or not self.hud.visible or self.hud_in_exports:
            return None
        left, top = (int(round(v)) for v in self.dock_origin)
        if not left and not top:
            return None
        w, h = self.size
        return left, top, max(w - left, 1), max(h - top, 1)

    def grab(self, hud: bool = False) -> np.ndarray:
        """The scene as (h, w, 3) uint8 RGB at the canvas' physical size (without the HUD unless
        ``hud``; with the colour bar unless ``colorbar_in_exports`` is off)."""
        self.set_current()
        self.prepare()
        if self.colorbar_in_exports or not self.colorbar.visible:
            return self.render(alpha=False, hud=hud)
        self.colorbar.visible = False
        try:
            return self.render(alpha=False, hud=hud)
        finally:
            self.colorbar.visible = True

    def export_frame(self) -> np.ndarray:
        """A PNG or MP4 frame: the canvas beside the HUD (:meth:`export_region`: the scene as the
        user framed it), or the whole canvas with the HUD drawn in (``hud_in_exports``). The whole
        canvas is rendered and cut (rendering only the region through VisPy's
        ``render(region=...)`` left the 3D views' next frames blank)."""
        rgb = self.grab(hud=self.hud_in_exports and self.hud is not None and self.hud.visible)
        region = self.export_region()
        if region is None:
            return rgb
        s = self.pixel_scale
        x, y, w, h = (int(round(v * s)) for v in region)
        return np.ascontiguousarray(rgb[y:y + h, x:x + w])


# ---- the built-in packet kinds -------------------------------------------------------------------
class GridDrawer(Drawer):
    """grid2d / grid3d: the field texture (interop or host copy), obstacle mask, tracer overlay."""

    visuals = ("image",)

    def upload(self, canvas, pk):
        canvas._upload_grid(pk)

    def fit(self, canvas, pk):
        ny, nx = pk.data.shape[:2]  # cell (i, j) covers [i, i+1)·spacing: the image spans nx·spacing
        canvas.view.camera.set_range(x=(0, nx * pk.spacing), y=(0, ny * pk.spacing), margin=0.02)

    def extent(self, pk):
        """The field's domain when the packet gives one, else the cells' extent; a slice of a
        node-centred 3D grid from its first node to its last (the centres of the image's first and
        last cells)."""
        if pk.domain is not None:
            return tuple((float(lo) - o, float(hi) - o) for (lo, hi), o in zip(pk.domain, pk.origin))
        ny, nx = pk.data.shape[:2]
        h = float(pk.spacing)
        inset = h / 2 if pk.centering == "node" else 0.0
        return (inset, nx * h - inset), (inset, ny * h - inset)

    def display_label(self, canvas):
        # the field through shared buffers or a mapped texture (its tracers through vertex buffers)
        shared = isinstance(canvas._interop, SharedTexture)
        if not shared:
            return canvas.display_path
        return canvas.display_path + (" (shared buffer, drawn directly)" if canvas._interop.image is not None
                                      else " (shared buffers)")


class GeometryDrawer(Drawer):
    """Particles and boxes, 2D or 3D (then the orbit camera): 2D particles from the device on the
    interop path, boxes and the host path through host copies."""

    @abstractmethod
    def coords(self, pk: FramePacket):
        """The packet's (n, d) coordinates: d sets 2D or 3D."""

    def points(self, pk: FramePacket) -> np.ndarray:
        """Host points the camera frames when the packet has no domain bounds."""
        return host(self.coords(pk), pk.backend)

    def three_d(self, pk):
        a = self.coords(pk)
        return a is not None and a.ndim == 2 and int(a.shape[1]) == 3

    def fit(self, canvas, pk):
        if pk.bounds is not None:
            lo, hi = (np.asarray(b, np.float64) for b in pk.bounds)
        else:
            pts = self.points(pk)
            if len(pts) == 0:
                return
            lo, hi = pts.min(axis=0), pts.max(axis=0)
        canvas.fit_bounds(lo, hi)

    def extent(self, pk):
        # the domain's box when the packet has one; without it the points move every frame and
        # would move the axes' ends with them: no bound
        if pk.bounds is None:
            return None, None
        lo, hi = (np.asarray(b, np.float64) for b in pk.bounds)
        return (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))


class ParticlesDrawer(GeometryDrawer):
    """2D particles as flat sprites; 3D particles go to the sphere drawer (view3d)."""

    visuals = ("markers",)

    def resolve(self, canvas, pk):
        return canvas.own_drawer(Particles3DDrawer) if self.three_d(pk) else self

    def coords(self, pk):
        return pk.positions

    def upload(self, canvas, pk):
        canvas._upload_particles(pk)

    def display_label(self, canvas) -> str:
        return "interop (vertex buffers)" if canvas._from_device(canvas.shown) else self.label


class BoxesDrawer(GeometryDrawer):
    visuals = ("lines",)

    def coords(self, pk):
        return pk.lo

    def points(self, pk):
        return np.concatenate([host(pk.lo, pk.backend), host(pk.hi, pk.backend)])

    def upload(self, canvas, pk):
        canvas._upload_boxes(pk)


register("draw", "grid2d", GridDrawer())
register("draw", "grid3d", GridDrawer())
register("draw", "particles", ParticlesDrawer())
register("draw", "boxes", BoxesDrawer())
register_drawers()

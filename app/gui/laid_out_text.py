"""A VisPy Text that lays each string out once and sets its uniforms only when they change.

VisPy's TextVisual lays out every string again (``_text_to_vbo``: a Python loop over the glyphs)
whenever its ``text`` is set. The colour bar's tick labels are set again whenever an automatic
range moves their values, which is most frames of a live run, while most of the strings (the
nice values between the ends, and the ends whose rounding did not change) are ones it laid out a
frame before. Here a string's glyph quads are kept and reused; only strings not seen yet are laid
out. A string's layout depends on the glyphs, the font, the anchors and the line height, never on
the canvas, its size or the position the string is drawn at (the vertex shader places it), so a
kept one draws the same pixels.

VisPy's TextVisual also sets all seven of its uniforms before every draw, and one of them is a
sampler given as an array (``u_kernel``, the SDF filter kernel): each draw wrote that array into
its texture again (a texture upload, three GL calls a draw). Every text visual of the canvas
(colour bar, axes, the 3D views' labels, the probe's readout) is this one, so a steady frame
sets no text uniform and uploads no texture; a value that changed (a zoom changes the pixel
scale, a new font its atlas) is set as VisPy sets it.
"""
from __future__ import annotations

import numpy as np
from vispy import scene
from vispy.gloo import IndexBuffer, VertexBuffer
from vispy.visuals.text import text as vispy_text

from .held_uniforms import HeldUniforms
from .transform_key import transform_key

KEPT_LAYOUTS = 512  # strings kept per visual; past that the cache starts again (ticks of many ranges)


class LaidOutTextVisual(vispy_text.TextVisual):
    """TextVisual with its strings' glyph layouts kept and its uniforms set on change (same
    arguments, same pixels)."""

    def __init__(self, *args, **kwargs):
        self._layouts: dict = {}
        super().__init__(*args, **kwargs)
        self.unfreeze()
        self._uniforms = HeldUniforms(self.shared_program)
        self._px_key = self._px_value = None
        self.freeze()

    def _layout(self, string: str) -> np.ndarray:
        key = (string, self._font, self._anchors, self._font._lowres_size, self._line_height)
        vbo = self._layouts.get(key)
        if vbo is None:
            if len(self._layouts) >= KEPT_LAYOUTS:
                self._layouts.clear()
            vbo = self._layouts[key] = vispy_text._text_to_vbo(string, self._font, self._anchors[0],
                                                               self._anchors[1], self._font._lowres_size,
                                                               self._line_height)
        return vbo

    def _px_scale(self, transforms) -> np.ndarray:
        """TextVisual's pixel scale (document → render), computed again only when one of the
        transforms it is made of changed (a resize, an export's framebuffer): mapping through a
        chain built anew for every draw was most of a steady text draw's time."""
        key = transform_key(transforms.document_transform, transforms.canvas_transform,
                            transforms.framebuffer_transform)
        if key is None or key != self._px_key:
            tr = transforms.get_transform("document", "render")
            self._px_key, self._px_value = key, (tr.map((1, 0)) - tr.map((0, 1)))[:2]
        return self._px_value

    def _prepare_draw(self, view):
        # TextVisual._prepare_draw, with the layouts taken from the cache and the uniforms set on change
        if len(self.text) == 0:
            return False
        texts = [self.text] if isinstance(self.text, str) else self.text
        if self._vertices is None:
            n_char = sum(len(t) for t in texts)
            self._vertices_data = np.concatenate([self._layout(t) for t in texts])
            self._vertices = VertexBuffer(self._vertices_data)
            idx = (np.array([0, 1, 2, 0, 2, 3], np.uint32) + np.arange(0, 4 * n_char, 4, dtype=np.uint32)[:, None])
            self._index_buffer = IndexBuffer(idx.ravel())
            self.shared_program.bind(self._vertices)
            self._configure_gl_state()  # a new glyph's SDF rendering changed the GL state
        repeats = [4 * len(t) for t in texts]
        n_text = len(repeats)
        if self._pos_changed:
            pos = self.pos
            rot = self._rotation
            if isinstance(rot, (int, float)):
                rot = np.full((pos.shape[0],), self._rotation)
            rot = np.asarray(rot)
            if rot.shape[0] < n_text:
                rot = np.repeat(rot, [1] * (len(rot) - 1) + [n_text - len(rot) + 1], axis=0)
            rot = np.repeat(rot[:n_text], repeats, axis=0)
            self.shared_program["a_rotation"] = rot.astype(np.float32)
            if pos.shape[0] < n_text:
                pos = np.repeat(pos, [1] * (len(pos) - 1) + [n_text - len(pos) + 1], axis=0)
            pos = np.repeat(pos[:n_text], repeats, axis=0)
            assert pos.shape[0] == self._vertices.size == len(rot)
            self.shared_program["a_pos"] = pos
            self._pos_changed = False
        if self._color_changed:
            color = self.color.rgba
            if color.shape[0] < n_text:
                color = np.repeat(color, [1] * (len(color) - 1) + [n_text - len(color) + 1], axis=0)
            color = np.repeat(color[:n_text], repeats, axis=0)
            assert color.shape[0] == self._vertices.size
            self._color_vbo = VertexBuffer(color)
            self.shared_program.vert["color"] = self._color_vbo
            self._color_changed = False
        transforms = self.transforms
        self._uniforms.set("u_npix", (self._font_size / 72.0) * transforms.dpi)  # logical px
        self._uniforms.set("u_px_scale", self._px_scale(transforms))
        self._uniforms.set("u_scaling", self._scaling)
        self._uniforms.set("u_kernel", self._font._kernel, by_identity=True)
        self._uniforms.set("u_color", self._color.rgba)
        self._uniforms.set("u_font_atlas", self._font._atlas, by_identity=True)
        self._uniforms.set("u_font_atlas_shape", self._font._atlas.shape[:2])


LaidOutText = scene.visuals.create_visual_node(LaidOutTextVisual)

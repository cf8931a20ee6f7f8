"""A VisPy Text that lays each string out once.

VisPy's TextVisual lays out every string again (``_text_to_vbo``: a Python loop over the glyphs)
whenever its ``text`` is set. The colour bar's tick labels are set again whenever an automatic
range moves their values, which is most frames of a live run, while most of the strings (the
nice values between the ends, and the ends whose rounding did not change) are ones it laid out a
frame before. Here a string's glyph quads are kept and reused; only strings not seen yet are laid
out. A string's layout depends on the glyphs, the font, the anchors and the line height, never on
the canvas, its size or the position the string is drawn at (the vertex shader places it), so a
kept one draws the same pixels.
"""
from __future__ import annotations

import numpy as np
from vispy import scene
from vispy.gloo import IndexBuffer, VertexBuffer
from vispy.visuals.text import text as vispy_text

KEPT_LAYOUTS = 512  # strings kept per visual; past that the cache starts again (ticks of many ranges)


class LaidOutTextVisual(vispy_text.TextVisual):
    """TextVisual with its strings' glyph layouts kept (same arguments, same pixels)."""

    def __init__(self, *args, **kwargs):
        self._layouts: dict = {}
        super().__init__(*args, **kwargs)

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

    def _prepare_draw(self, view):
        if self._vertices is None and len(self.text):
            # what TextVisual._prepare_draw does here, the layouts taken from the cache
            texts = [self.text] if isinstance(self.text, str) else self.text
            n_char = sum(len(t) for t in texts)
            self._vertices_data = np.concatenate([self._layout(t) for t in texts])
            self._vertices = VertexBuffer(self._vertices_data)
            idx = (np.array([0, 1, 2, 0, 2, 3], np.uint32) + np.arange(0, 4 * n_char, 4, dtype=np.uint32)[:, None])
            self._index_buffer = IndexBuffer(idx.ravel())
            self.shared_program.bind(self._vertices)
            self._configure_gl_state()  # a new glyph's SDF rendering changed the GL state
        return super()._prepare_draw(view)


LaidOutText = scene.visuals.create_visual_node(LaidOutTextVisual)

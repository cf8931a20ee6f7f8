"""A 2D field drawn straight from a GL buffer: no texture write a frame.

Why: after CUDA fills the shared buffer (shared_texture.py), GL used to copy it into the field's
texture every frame. A *buffer texture* (``GL_TEXTURE_BUFFER``, sampled with ``texelFetchBuffer``)
reads the shared buffer itself, so the only per-frame work is CUDA's copy and the draw. Measured
(docs/decisions.md D25): ~0.1 ms less of the simulation's GPU time a frame
(median of three paired calls), less than leaving the write out altogether suggested (~0.6 ms) —
most of the cost is GL touching memory CUDA has just written, which the draw still does.

VisPy knows no buffer textures, so this module adds the two pieces it needs, without touching its
source: a GLIR object class (``_GlirBufferTexture``: a texture whose target is
``GL_TEXTURE_BUFFER``, registered on a canvas' GLIR parser by :func:`register`) and a gloo object
(:class:`BufferTexture`) whose ``glsl_type`` is ``samplerBuffer``. A program given one binds it to
a texture unit like any sampler; pointing it at another buffer is one ordered GLIR command
(``glTexBuffer``), so it takes effect exactly at the draw that follows.

:class:`FieldImage` is VisPy's Image whose data lookup can switch between its own texture (host
uploads, the mapped-texture fallback) and such a buffer. The lookup is nearest-cell, like the
canvas' "nearest" texture sampling, so both paths give the same pixels (tests/app/test_buffer_field.py).
GLSL 1.20 (VisPy's desktop dialect) reaches ``samplerBuffer`` through ``GL_EXT_gpu_shader4``, which
the NVIDIA driver and Mesa offer on desktop GL.
"""
from __future__ import annotations

from vispy import scene
from vispy.gloo import glir
from vispy.gloo.texture import BaseTexture
from vispy.visuals.shaders import Function

GL_TEXTURE_BUFFER = 0x8C2A
GL_R32F = 0x822E
GL_RGBA32F = 0x8814
_GLIR_NAME = "NagareBufferTexture"


class _GlirBufferTexture(glir.GlirTexture):
    """GLIR side: a GL texture object of target GL_TEXTURE_BUFFER; DATA attaches a buffer."""

    _target = glir.gl.Enum("GL_TEXTURE_BUFFER", GL_TEXTURE_BUFFER)

    def set_data(self, offset, data):  # noqa: ARG002 (GLIR's DATA signature)
        from OpenGL import GL  # PyOpenGL (≈0.2 s) loads only when a shared buffer is drawn

        buffer, internalformat = data
        GL.glBindTexture(GL_TEXTURE_BUFFER, self._handle)
        GL.glTexBuffer(GL_TEXTURE_BUFFER, internalformat, buffer)
        GL.glBindTexture(GL_TEXTURE_BUFFER, 0)


def register(canvas) -> bool:
    """Teach the canvas' GLIR parser the buffer texture (idempotent). False where this VisPy has no
    parser class map to extend (a private attribute: the field is then drawn from its texture)."""
    try:
        canvas.context.shared.parser._classmap[_GLIR_NAME] = _GlirBufferTexture
    except (AttributeError, TypeError):
        return False
    return True


class BufferTexture(BaseTexture):
    """A texture reading a GL buffer of float32 texels (``r32f`` or ``rgba32f``), for a
    ``samplerBuffer`` uniform. :meth:`attach` points it at a buffer (ordered with the draws)."""

    _GLIR_TYPE = _GLIR_NAME

    def __init__(self):  # noqa: D107 (no data of its own: BaseTexture's storage set-up is skipped)
        super(BaseTexture, self).__init__()
        self.buffer = 0

    @property
    def glsl_type(self):
        return "uniform", "samplerBuffer"

    def attach(self, gl_buffer: int, channels: int = 1) -> None:
        if gl_buffer != self.buffer:
            self.buffer = int(gl_buffer)
            self._glir.command("DATA", self._id, 0, (self.buffer, GL_R32F if channels == 1 else GL_RGBA32F))


_BUFFER_LOOKUP = """
    #extension GL_EXT_gpu_shader4 : enable
    vec4 buffer_lookup(vec2 texcoord) {
        if(texcoord.x < 0.0 || texcoord.x > 1.0 ||
        texcoord.y < 0.0 || texcoord.y > 1.0) {
            discard;
        }
        ivec2 size = ivec2($shape);
        ivec2 ij = clamp(ivec2(floor(texcoord * $shape)), ivec2(0, 0), size - ivec2(1, 1));
        return vec4(texelFetchBuffer($field, ij.y * size.x + ij.x).r, 0.0, 0.0, 1.0);
    }"""


class FieldImage(scene.visuals.Image):
    """VisPy's Image (``r32f``, nearest) that can take its texels from a GL buffer instead."""

    def __init__(self, *args, **kwargs):
        self._field_buffer: BufferTexture | None = None  # sampled instead of the texture while set
        self._buffer_lookup = Function(_BUFFER_LOOKUP)
        self._buffer_shape: tuple | None = None  # the lookup's $shape (set on change only: every frame calls)
        super().__init__(*args, **kwargs)

    @property
    def samples_buffer(self) -> bool:
        return self._field_buffer is not None

    def sample_buffer(self, gl_buffer: int | None, shape: tuple[int, int] | None = None) -> None:
        """Draw the field from ``gl_buffer`` ((rows, cols) float32, rows contiguous; ``shape`` as the
        image's data), or from the image's own texture again with None."""
        if gl_buffer is None:
            if self._field_buffer is not None:
                # its GL object goes (it would keep the buffer's memory alive), and the lookup
                # that names it with it: a fresh one next time
                self._field_buffer.delete()
                self._field_buffer = None
                self._buffer_lookup = Function(_BUFFER_LOOKUP)
                self._buffer_shape = None
                self._need_interpolation_update = True
                self.update()
            return
        if self._field_buffer is None:
            self._field_buffer = BufferTexture()
            self._need_interpolation_update = True
        self._field_buffer.attach(gl_buffer)
        if tuple(shape) != self._buffer_shape:
            self._buffer_shape = tuple(shape)
            self._buffer_lookup["shape"] = (float(shape[1]), float(shape[0]))
        self.update()

    def _build_interpolation(self):
        if self._field_buffer is None:
            return super()._build_interpolation()
        self._buffer_lookup["field"] = self._field_buffer
        self._data_lookup_fn = self._buffer_lookup
        self.shared_program.frag["get_data"] = self._buffer_lookup
        self._need_interpolation_update = False

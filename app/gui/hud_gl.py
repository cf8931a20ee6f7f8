"""The HUD's GL renderer: imgui-bundle's programmable-pipeline renderer with a frame's ctypes GL
calls cut from about 150 to about 50.

The stock renderer asks GL for seventeen pieces of state before it draws (to put them back after)
and sets every one back whether it changed or not; it goes through PyOpenGL's wrappers, which call
``glGetError`` after every call. Each of these is a ctypes call that lets go of the GIL the
simulation thread is waiting for, and the HUD is drawn every frame. Here:

- the blend, cull, depth and scissor switches and the blend function and equation are taken from
  what the canvas' state filter saw VisPy set this frame (gl_state.py), and asked of GL only where
  it saw nothing (five queries a frame remain: the scissor switch, program, vertex array, viewport
  and scissor box); a switch the HUD leaves as it was is not set, nor set back;
- the sampler unit and the projection are set when they change, not every frame; the font atlas
  is bound when a command's texture differs from the last one's;
- the calls go to GL's entry points through ctypes prototypes of our own (:class:`BareGL`), not
  PyOpenGL's functions, raw ones included, which each call ``glGetError`` after themselves; one
  ``glGetError`` after the HUD raises what they would have raised.

What the HUD leaves is what the stock renderer left, so VisPy's next frame starts from the same
state: the switches, the blend function (its RGB pair for both, as ``glBlendFunc`` with the
values of ``GL_BLEND_SRC``/``GL_BLEND_DST``), the blend equations, the viewport and scissor box,
the program and the vertex array; texture unit 0 active with no 2D texture bound, no array buffer
bound (VisPy binds what it draws with before each draw and unbinds after it). The polygon mode is
neither set nor set back: nothing in the canvas changes it from GL_FILL (VisPy's GL ES 2 API has
no glPolygonMode).
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_float, c_int, c_ssize_t, c_ubyte, c_uint, c_void_p

import OpenGL.GL as gl
from imgui_bundle import imgui
from imgui_bundle.python_backends.opengl_backend_programmable import ProgrammablePipelineRenderer
from OpenGL import platform

# the entry points the HUD calls every frame: name → (result, argument types)
SIGNATURES = {
    "glEnable": (None, c_uint),
    "glDisable": (None, c_uint),
    "glBlendEquationSeparate": (None, c_uint, c_uint),
    "glBlendFunc": (None, c_uint, c_uint),
    "glActiveTexture": (None, c_uint),
    "glViewport": (None, c_int, c_int, c_int, c_int),
    "glScissor": (None, c_int, c_int, c_int, c_int),
    "glUseProgram": (None, c_uint),
    "glUniform1i": (None, c_int, c_int),
    "glUniformMatrix4fv": (None, c_int, c_int, c_ubyte, POINTER(c_float)),
    "glBindVertexArray": (None, c_uint),
    "glBindBuffer": (None, c_uint, c_uint),
    "glBufferData": (None, c_uint, c_ssize_t, c_void_p, c_uint),
    "glBindTexture": (None, c_uint, c_uint),
    "glDrawElements": (None, c_uint, c_int, c_uint, c_void_p),
    "glGetError": (c_uint,),
}


class BareGL:
    """GL entry points as plain ctypes functions (no error check after each call), looked up with
    the HUD's context current; one PyOpenGL could not look up is PyOpenGL's own."""

    def __init__(self):
        for name, (result, *args) in SIGNATURES.items():
            address = platform.PLATFORM.getExtensionProcedure(name.encode())
            fn = ctypes.CFUNCTYPE(result, *args)(address) if address else getattr(gl, name)
            setattr(self, name, fn)

SWITCHES = (gl.GL_BLEND, gl.GL_CULL_FACE, gl.GL_DEPTH_TEST, gl.GL_SCISSOR_TEST)
HUD_SWITCHES = {gl.GL_BLEND: True, gl.GL_CULL_FACE: False, gl.GL_DEPTH_TEST: False, gl.GL_SCISSOR_TEST: True}
HUD_EQUATION = (gl.GL_FUNC_ADD, gl.GL_FUNC_ADD)
HUD_FUNC = (gl.GL_SRC_ALPHA, gl.GL_ONE_MINUS_SRC_ALPHA)


class StockRenderer(ProgrammablePipelineRenderer):
    """imgui-bundle's renderer with LeanRenderer's call signature (the fallback, and tests)."""

    def render(self, draw_data: imgui.ImDrawData, known: dict | None = None) -> None:
        super().render(draw_data)


class LeanRenderer(ProgrammablePipelineRenderer):
    """ProgrammablePipelineRenderer drawing the same triangles with fewer GL calls (module doc)."""

    lean = True  # Hud.render falls back to StockRenderer when this one fails

    def __init__(self):
        super().__init__()
        self._projection_for = None  # the display size the program's ProjMtx was set for
        self._sampler_set = False
        self._bare = None  # BareGL, made at the first frame (a context current)
        self._index_type = gl.GL_UNSIGNED_SHORT if imgui.INDEX_SIZE == 2 else gl.GL_UNSIGNED_INT
        self.gl_calls = 0  # GL calls of the last frame (tests, the frame census)
        self.gl_calls_total = 0  # ... and of all frames (bench_display: a frame's mean)

    def render(self, draw_data: imgui.ImDrawData, known: dict | None = None) -> None:
        """Draw ``draw_data``; ``known``: GL state the caller knows GL has now (RedundantStateFilter.known)."""
        io = self.io
        display_w, display_h = io.display_size
        fb_scale = io.display_framebuffer_scale
        fb_w, fb_h = int(display_w * fb_scale[0]), int(display_h * fb_scale[1])
        self._update_textures()
        if fb_w == 0 or fb_h == 0:
            return
        draw_data.scale_clip_rects(fb_scale)
        known = known or {}
        if self._bare is None:
            self._bare = BareGL()
        bare = self._bare
        calls = 0
        switches = {}
        for cap in SWITCHES:
            on = known.get(("enabled", cap))
            if on is None:
                on, calls = bool(gl.glIsEnabled(cap)), calls + 1
            switches[cap] = on
        func = known.get("glBlendFuncSeparate")
        if func is None:
            func, calls = (int(gl.glGetIntegerv(gl.GL_BLEND_SRC)), int(gl.glGetIntegerv(gl.GL_BLEND_DST))), calls + 2
        equation = known.get("glBlendEquationSeparate")
        if equation is None:
            equation = (int(gl.glGetIntegerv(gl.GL_BLEND_EQUATION_RGB)),
                        int(gl.glGetIntegerv(gl.GL_BLEND_EQUATION_ALPHA)))
            calls += 2
        program = int(gl.glGetIntegerv(gl.GL_CURRENT_PROGRAM))
        vertex_array = int(gl.glGetIntegerv(gl.GL_VERTEX_ARRAY_BINDING))
        viewport = tuple(int(v) for v in gl.glGetIntegerv(gl.GL_VIEWPORT))
        scissor_box = tuple(int(v) for v in gl.glGetIntegerv(gl.GL_SCISSOR_BOX))
        calls += 4

        hud_viewport = (0, 0, fb_w, fb_h)
        try:
            for cap, on in HUD_SWITCHES.items():
                if switches[cap] != on:
                    (bare.glEnable if on else bare.glDisable)(cap)
                    calls += 1
            bare.glBlendEquationSeparate(*HUD_EQUATION)
            bare.glBlendFunc(*HUD_FUNC)
            bare.glActiveTexture(gl.GL_TEXTURE0)
            if viewport != hud_viewport:
                bare.glViewport(*hud_viewport)
                calls += 1
            bare.glUseProgram(self._shader_handle)
            calls += 4
            if not self._sampler_set:
                bare.glUniform1i(self._attrib_location_tex, 0)
                self._sampler_set, calls = True, calls + 1
            if self._projection_for != (display_w, display_h):
                self._projection_for = (display_w, display_h)
                ortho = (ctypes.c_float * 16)(2.0 / display_w, 0.0, 0.0, 0.0, 0.0, 2.0 / -display_h, 0.0, 0.0,
                                              0.0, 0.0, -1.0, 0.0, -1.0, 1.0, 0.0, 1.0)
                bare.glUniformMatrix4fv(self._attrib_proj_mtx, 1, gl.GL_FALSE, ortho)
                calls += 1
            bare.glBindVertexArray(self._vao_handle)
            calls += 1

            bound_texture = None
            index_type, index_size, vertex_size = self._index_type, imgui.INDEX_SIZE, imgui.VERTEX_SIZE
            for commands in draw_data.cmd_lists:
                bare.glBindBuffer(gl.GL_ARRAY_BUFFER, self._vbo_handle)
                bare.glBufferData(gl.GL_ARRAY_BUFFER, commands.vtx_buffer.size() * vertex_size,
                                  ctypes.c_void_p(commands.vtx_buffer.data_address()), gl.GL_STREAM_DRAW)
                bare.glBindBuffer(gl.GL_ELEMENT_ARRAY_BUFFER, self._elements_handle)
                bare.glBufferData(gl.GL_ELEMENT_ARRAY_BUFFER, commands.idx_buffer.size() * index_size,
                                  ctypes.c_void_p(commands.idx_buffer.data_address()), gl.GL_STREAM_DRAW)
                calls += 4
                for command in commands.cmd_buffer:
                    texture = command.tex_ref.get_tex_id()
                    if texture != bound_texture:
                        bare.glBindTexture(gl.GL_TEXTURE_2D, texture)
                        bound_texture, calls = texture, calls + 1
                    x, y, z, w = command.clip_rect
                    bare.glScissor(int(x), int(fb_h - w), int(z - x), int(w - y))
                    bare.glDrawElements(gl.GL_TRIANGLES, command.elem_count, index_type,
                                        ctypes.c_void_p(command.idx_offset * index_size))
                    calls += 2
        finally:  # back as the stock renderer leaves it (module doc), also after a failed call
            bare.glBindTexture(gl.GL_TEXTURE_2D, 0)
            bare.glBlendEquationSeparate(*equation)
            bare.glBlendFunc(func[0], func[1])
            calls += 3
            for cap, on in HUD_SWITCHES.items():
                if switches[cap] != on:
                    (bare.glEnable if switches[cap] else bare.glDisable)(cap)
                    calls += 1
            bare.glScissor(*scissor_box)
            if viewport != hud_viewport:
                bare.glViewport(*viewport)
                calls += 1
            bare.glUseProgram(program)
            bare.glBindVertexArray(vertex_array)
            bare.glBindBuffer(gl.GL_ARRAY_BUFFER, 0)
        error = bare.glGetError()
        calls += 5
        self.gl_calls = calls
        self.gl_calls_total += calls
        if error != gl.GL_NO_ERROR:
            raise RuntimeError(f"OpenGL error 0x{int(error):04x} while drawing the HUD")

"""A live frame must not rebuild shader programs: with an automatic colour range the colour bar
is placed again every frame, and a new transform object there recompiled its image's program
each time (9 ms of the UI thread a frame, and a program link in the GL driver)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import isolated

pytestmark = pytest.mark.gui


def _packet(kind, seq, rng):
    from nagare.app.packets import FramePacket

    lo, hi = np.float32(0.1 * rng.random()), np.float32(1 + rng.random())  # a new range every frame
    if kind == "grid2d":
        return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind=kind, fields=("f",),
                           data=rng.random((48, 64)).astype(np.float32), vmin=lo, vmax=hi)
    n = 300
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind=kind, fields=("f",),
                       positions=rng.random((n, 3)).astype(np.float32), data=rng.random(n).astype(np.float32),
                       vmin=lo, vmax=hi, bounds=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), radius=0.01)


@pytest.mark.parametrize("kind", ["grid2d", "particles"])
def test_frames_with_a_changing_range_rebuild_no_shader_program(make_canvas, monkeypatch, kind):
    if not isolated(__file__, f"test_frames_with_a_changing_range_rebuild_no_shader_program[{kind}]"):
        return
    from vispy.visuals.shaders.program import ModularProgram

    c = make_canvas(480, 360)
    rng = np.random.default_rng(3)
    for seq in range(3):  # the first frames build every program once
        c.show_packet(_packet(kind, seq, rng))
        c.draw_now(finish=True)
    builds = []
    inner = ModularProgram._build
    monkeypatch.setattr(ModularProgram, "_build", lambda self: (builds.append(self), inner(self))[1])
    ticks = []
    for seq in range(3, 13):
        c.show_packet(_packet(kind, seq, rng))
        c.draw_now(finish=True)
        ticks.append(tuple(c.colorbar._tick_labels))
    assert len(set(ticks)) > 5  # the bar did follow the range
    # a shorter column: the bar's image is scaled through the same transform object, in place
    tr = c.colorbar.image.transform
    scale0 = float(tr.scale[1])
    c.colorbar.resize(c.colorbar.size[0], c.colorbar.size[1] - 60)
    c.draw_now(finish=True)
    assert c.colorbar.image.transform is tr and float(tr.scale[1]) < scale0 - 0.1
    assert builds == []


def _volume_packet(seq, rng):
    """An amr3d-like frame: a node-centred volume, tracers with trails, octree leaves of three
    levels (a legend in the colour bar), a solid body; a new automatic range every frame."""
    from nagare.app.packets import FramePacket

    vol = rng.random((6, 8, 10)).astype(np.float32)
    trails = (1.0 + np.cumsum(rng.random((5, 7, 3)), axis=0) * 0.4).astype(np.float32)
    pk = FramePacket(seq=seq, step=seq, time=0.0, field_name="speed", kind="volume3d", fields=("speed",),
                     data=vol, vmin=np.float32(0.1 * rng.random()), vmax=np.float32(1 + rng.random()),
                     spacing=0.5, slice_count=6, centering="node", overlay=trails[-1].copy(), trails=trails,
                     boxes=_BOXES, boxes_levels=(0, 1, 2))
    pk.surfaces = _SURFACES
    return pk


_BOXES = (np.array([[0, 0, 0], [2, 0, 0], [2, 1, 0]], np.float32), np.array([[2, 4, 3], [4, 2, 1.5], [3, 2, 1]],
                                                                              np.float32), np.array([0, 1, 2]))
_SURFACES = ((np.array([[1, 1, 1], [2, 1, 1], [1, 2, 1], [1, 1, 2]], np.float32),
              np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.uint32)),)


# the host path with the volume off and the translucent volume in the slow step: the interop path and
# the MIP volume (a volume shader) keep the quick one's coverage of both
@pytest.mark.parametrize("path,volume", [pytest.param("host", "off", marks=pytest.mark.slow), ("interop", "off"),
                                         ("host", "mip"), pytest.param("host", "translucent", marks=pytest.mark.slow)])
def test_3d_grid_frames_rebuild_no_shader_program(make_canvas, monkeypatch, path, volume):
    """The amr3d view (planes, leaves with their legend, tracers and trails, a body, the volume
    rendering) under an automatic range: after the first frames no visual changes its shader source
    (the legend's swatches, the tracers' transform and the volume's method and colour map were set
    again with every packet, each a program rebuild)."""
    name = f"test_3d_grid_frames_rebuild_no_shader_program[{path}-{volume}]"
    if not isolated(__file__, name):
        return
    from vispy.visuals.shaders.program import ModularProgram

    from tests.app.test_device_draw import _device_drawer

    c = make_canvas(480, 360)
    c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True, volume=volume)
    if path == "interop":
        c.display_path = "interop"
        _device_drawer(c)  # NumPy standing for CuPy, a fake buffer registration (test_device_draw.py)
    rng = np.random.default_rng(5)
    for seq in range(3):
        c.show_packet(_volume_packet(seq, rng))
        c.draw_now(finish=True)
    assert c.colorbar.levels == [0, 1, 2]
    builds = []
    inner = ModularProgram._build
    monkeypatch.setattr(ModularProgram, "_build", lambda self: (builds.append(self), inner(self))[1])
    for seq in range(3, 10):
        c.show_packet(_volume_packet(seq, rng))
        c.draw_now(finish=True)
    assert builds == []
    if volume != "off":  # a change of the volume's look still reaches its shader
        c.set_view3d(volume="translucent" if volume == "mip" else "mip")
        c.draw_now(finish=True)
        assert len(builds) == 1


def test_colour_bar_moves_only_its_ticks_for_a_new_range(make_canvas, monkeypatch):
    """A new range alone re-places the ticks, not the title, bar or legend; a range whose labels
    were shown before lays no string out again; a new label or size places the whole bar."""
    if not isolated(__file__, "test_colour_bar_moves_only_its_ticks_for_a_new_range"):
        return
    from nagare.app.gui import colorbar as colorbar_module
    from nagare.app.gui.colorbar import ColorBar, level_legend
    from nagare.app.gui.view3d import level_colours
    from vispy.visuals.text import text as vispy_text

    c = make_canvas(480, 360)
    c._colorbar_wanted = True  # shown without a packet: what _update_colorbar decides for a ranged one
    c.relayout()
    bar = c.colorbar
    bar.set_legend(level_legend([0, 1, 2], level_colours([0, 1, 2])))
    bar.set(0.0, 1.0, "speed", "m/s")
    c.draw_now(finish=True)
    places, legends, layouts = [], [], []
    inner_place, inner_legend_set = ColorBar._place, bar.legend_swatches.set_data
    monkeypatch.setattr(ColorBar, "_place", lambda self: (places.append(1), inner_place(self))[1])
    monkeypatch.setattr(bar.legend_swatches, "set_data", lambda *a, **k: (legends.append(1), inner_legend_set(*a, **k)))
    inner_layout = vispy_text._text_to_vbo
    monkeypatch.setattr(vispy_text, "_text_to_vbo", lambda t, *a: (layouts.append(t), inner_layout(t, *a))[1])
    title, rows = bar._title_state, list(bar.legend_rows)
    for hi in (1.5, 2.0, 1.5):
        bar.set(0.0, hi, "speed", "m/s")
        bar.set_legend(level_legend([0, 1, 2], level_colours([0, 1, 2])))  # equal: nothing to do
        c.draw_now(finish=True)
        assert bar._tick_labels[-1] == colorbar_module.range_labels(0.0, hi)[1]
    assert places == [] and legends == [] and bar._title_state == title and bar.legend_rows == rows
    first = list(layouts)
    assert first  # the new labels of 1.5 and 2.0 were laid out …
    bar.set(0.0, 2.0, "speed", "m/s")
    c.draw_now(finish=True)
    assert layouts == first  # … and 2.0's again: none
    bar.set(0.0, 2.0, "pressure", "Pa")
    assert places == [1]
    bar.resize(bar.size[0], bar.size[1] - 40)
    assert places == [1, 1] and legends == [1]  # a new height lays the legend out again


def test_laid_out_text_draws_the_pixels_of_vispy_text(make_canvas):
    """The colour bar's tick labels (LaidOutText, layouts kept) draw what VisPy's Text draws, also
    after their strings were changed and changed back."""
    if not isolated(__file__, "test_laid_out_text_draws_the_pixels_of_vispy_text"):
        return
    from nagare.app.gui.laid_out_text import LaidOutText
    from vispy import scene

    frames = {}
    for cls in (scene.visuals.Text, LaidOutText):
        c = make_canvas(240, 160, colorbar=False, axes=False)
        c.view.camera = scene.PanZoomCamera(aspect=None)
        c.view.camera.rect = (0, 0, 240, 160)
        t = cls(["0.0619", "-1.5e-03", "2"], color="white", font_size=9, anchor_x="left", anchor_y="center",
                pos=np.array([[10, 30], [10, 80], [120, 120]], np.float32), parent=c.view.scene)
        c.draw_now(finish=True)
        t.text = ["7", "x", "y"]
        c.draw_now(finish=True)
        t.text = ["0.0619", "-1.5e-03", "2"]
        frames[cls] = c.grab()
        c.close()
    a, b = (f.astype(int) for f in frames.values())
    assert (np.abs(a - a[0, 0]).max(axis=-1) > 60).sum() > 50  # text is drawn
    np.testing.assert_array_equal(a, b)


def test_repeated_gl_state_is_left_out_and_the_frames_stay_the_same(make_canvas, monkeypatch):
    """The canvas' GLIR parser runs a state command only where GL does not have that state yet:
    most of them are left out of a frame, and the frames (a 3D grid with leaves, tracers, a body,
    the colour bar; a 2D grid with tracers and axes) are the pixels of every command run."""
    if not isolated(__file__, "test_repeated_gl_state_is_left_out_and_the_frames_stay_the_same"):
        return
    from nagare.app.gui.gl_state import RedundantStateFilter
    from nagare.app.packets import FramePacket

    def frames(filtered: bool):
        if not filtered:
            monkeypatch.setattr(RedundantStateFilter, "_needed", lambda self, command: True)
        c = make_canvas(420, 320)
        rng = np.random.default_rng(8)
        c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True)
        for seq in range(3):
            c.show_packet(_volume_packet(seq, rng))
            c.draw_now(finish=True)
        dropped = c.gl_state().dropped
        shots = [c.grab()]
        field = rng.random((40, 56)).astype(np.float32)
        tracers = (rng.random((30, 2)) * [56, 40]).astype(np.float32)
        for seq in range(3, 5):
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                      data=field, overlay=tracers, vmin=0.0, vmax=1.0))
            c.draw_now(finish=True)
        shots.append(c.grab())
        c.close()
        monkeypatch.undo()
        return shots, dropped

    with_filter, dropped = frames(True)
    without, none_dropped = frames(False)
    assert dropped > 100 and none_dropped == 0
    for a, b in zip(with_filter, without):
        assert (np.abs(a.astype(int) - a[2, 2].astype(int)).max(axis=-1) > 30).sum() > 500  # a scene is drawn
        np.testing.assert_array_equal(a, b)


def test_the_state_filter_drops_only_what_gl_has():
    """Unit: a repeated capability or value is dropped, a changed one runs, string and integer
    enums are the same state, an alias and CURRENT forget, other commands always run."""
    from nagare.app.gui.gl_state import RedundantStateFilter
    from vispy.gloo import gl

    ran = []
    parser = type("Parser", (), {"parse": lambda self, commands: ran.extend(commands)})()
    f = RedundantStateFilter.install(parser)
    assert RedundantStateFilter.install(parser) is f
    blend = ("FUNC", "glEnable", "blend")
    func = ("FUNC", "glBlendFuncSeparate", "src_alpha", "one_minus_src_alpha", "one", "one")
    parser.parse([blend, func, ("DRAW", 1, "triangles"), blend, ("FUNC", "glEnable", gl.GL_BLEND), func,
                  ("DRAW", 1, "triangles")])
    assert ran == [blend, func, ("DRAW", 1, "triangles"), ("DRAW", 1, "triangles")]
    ran.clear()
    parser.parse([("FUNC", "glDisable", gl.GL_BLEND), blend, ("FUNC", "glBlendFunc", "one", "zero"), func,
                  ("FUNC", "glLineWidth", 2.0), ("FUNC", "glLineWidth", 2.0)])
    assert ran == [("FUNC", "glDisable", gl.GL_BLEND), blend, ("FUNC", "glBlendFunc", "one", "zero"), func,
                   ("FUNC", "glLineWidth", 2.0)]
    ran.clear()
    parser.parse([("CURRENT", 0, 0), blend])
    f.forget()
    parser.parse([blend, ("FUNC", "glViewport", 0, 0, 4, 4), ("FUNC", "glViewport", 0, 0, 4, 4)])
    assert ran == [("CURRENT", 0, 0), blend, blend, ("FUNC", "glViewport", 0, 0, 4, 4),
                   ("FUNC", "glViewport", 0, 0, 4, 4)]


def test_the_state_filter_drops_a_uniform_its_program_holds():
    """Unit: a uniform set again to the same value is dropped (across frames and makes-current:
    forget() is for GL state others may touch); another value, another program, or the program
    linked, created or deleted since, lets it through."""
    from nagare.app.gui.gl_state import RedundantStateFilter

    ran = []
    parser = type("Parser", (), {"parse": lambda self, commands: ran.extend(commands)})()
    f = RedundantStateFilter.install(parser)

    def uniform(program, value):
        return ("UNIFORM", program, "u_npix", "float", np.array([value], np.float32))

    parser.parse([uniform(3, 12.0), uniform(3, 12.0), uniform(4, 12.0)])
    f.forget()
    parser.parse([uniform(3, 12.0), uniform(3, 13.0), uniform(3, 13.0)])
    assert [(c[1], float(c[4][0])) for c in ran] == [(3, 12.0), (4, 12.0), (3, 13.0)]
    ran.clear()
    for reset in (("LINK", 3), ("DELETE", 3), ("CREATE", 3, "Program")):
        parser.parse([reset, uniform(3, 13.0), uniform(3, 13.0)])
    parser.parse([("CURRENT", 0, 0), uniform(3, 13.0)])  # made current again: the program keeps its uniforms
    # after its DELETE a program holds nothing: what is sent to it passes and is not remembered
    assert [c[0] for c in ran] == ["LINK", "UNIFORM", "DELETE", "UNIFORM", "UNIFORM", "CREATE", "UNIFORM",
                                   "CURRENT"]


def test_the_state_filter_forgets_what_a_failed_batch_may_not_have_sent():
    """Unit: when the parser raises in mid-batch (a glTexBuffer or shader error the canvas catches before
    its fallback), the values recorded for that batch may never have reached GL: the next batch sends
    them again."""
    from nagare.app.gui.gl_state import RedundantStateFilter

    ran, fail = [], [True]

    def parse(self, commands):
        for c in commands:
            if fail[0] and c[0] == "FUNC" and c[1] == "glTexBuffer":
                raise RuntimeError("GL error")
            ran.append(c)

    parser = type("Parser", (), {"parse": parse})()
    RedundantStateFilter.install(parser)
    blend = ("FUNC", "glEnable", "blend")
    uniform = ("UNIFORM", 3, "u_npix", "float", np.array([12.0], np.float32))
    with pytest.raises(RuntimeError):
        parser.parse([("FUNC", "glTexBuffer", 1), blend, uniform])
    fail[0] = False
    parser.parse([blend, uniform])
    assert ran == [blend, uniform]


def test_the_lean_hud_renderer_draws_the_stock_renderers_pixels(make_canvas, monkeypatch):
    """hud_gl.LeanRenderer against imgui-bundle's renderer: the same HUD pixels, and the same scene
    in the frame after it (VisPy's first visuals inherit the GL state the HUD leaves), for a 2D
    grid with axes and a 3D view; a frame's HUD takes at most 50 GL calls (the stock renderer: about
    30 to save and restore state and 3 a draw command, each followed by PyOpenGL's glGetError: some
    150)."""
    if not isolated(__file__, "test_the_lean_hud_renderer_draws_the_stock_renderers_pixels"):
        return
    from types import SimpleNamespace

    from imgui_bundle.python_backends.opengl_backend_programmable import ProgrammablePipelineRenderer
    from nagare.app.gui import hud_gl
    from nagare.app.gui.hud import Hud
    from nagare.app.packets import FramePacket

    class Stock(ProgrammablePipelineRenderer):
        def render(self, draw_data, known=None):
            super().render(draw_data)

    history = [SimpleNamespace(wall=0.25 * i, step=10 * i, steps_per_s=40.0, updates_per_s=4e6 + 1e4 * i,
                               gbytes_per_s=1.5, roofline_pct=12.0, phase_ms={"step": 2.0 + 0.1 * (i % 5)})
               for i in range(40)]

    def frames(renderer):
        monkeypatch.setattr(hud_gl, "LeanRenderer", renderer)
        c = make_canvas(720, 420)
        c.hud = Hud(c, lambda: (history, {}, "running · step 100"), lambda axis, choice: None)
        c.relayout()
        rng = np.random.default_rng(4)
        shots = []
        field = rng.random((40, 56)).astype(np.float32)
        tracers = (rng.random((30, 2)) * [56, 40]).astype(np.float32)
        for seq in range(3):
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                      data=field, overlay=tracers, vmin=0.0, vmax=1.0 + seq))
            c.draw_now(finish=True)
        shots += [c.grab(hud=True), c.grab()]
        c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True)
        for seq in range(3, 6):
            c.show_packet(_volume_packet(seq, rng))
            c.draw_now(finish=True)
        shots += [c.grab(hud=True), c.grab()]
        calls = getattr(c.hud.renderer, "gl_calls", None)
        c.close()
        monkeypatch.undo()
        return shots, calls

    stock, _ = frames(Stock)
    lean, calls = frames(hud_gl.LeanRenderer)
    assert calls is not None and calls <= 50
    for with_hud, without in zip(lean[0::2], lean[1::2]):  # the HUD is drawn in its column
        assert (np.abs(with_hud[:, :300].astype(int) - without[:, :300]).max(axis=-1) > 30).sum() > 500
    for a, b in zip(stock, lean):
        np.testing.assert_array_equal(a, b)


def test_a_visuals_state_commands_are_the_ones_vispys_set_state_queues():
    """Unit: gl_state.state_commands(state) is the command list VisPy's set_state queues for it
    (presets, overrides, line width, an enum-valued setter); an unhashable state has none."""
    from nagare.app.gui.gl_state import state_commands
    from vispy.gloo.context import FakeCanvas

    canvas = FakeCanvas()
    for state in ({"preset": "translucent", "depth_test": False},
                  {"blend": True, "depth_test": False, "cull_face": False, "preset": None,
                   "blend_func": ("src_alpha", "one_minus_src_alpha")},
                  {"preset": "opaque", "line_width": np.float64(2.0), "line_smooth": False},
                  {"preset": "additive", "cull_face": "back", "polygon_offset": (1, 1)}):
        canvas.context.glir.clear()
        canvas.context.set_state(**state)  # VisPy's set_state, into this context's queue
        assert state_commands(state) == canvas.context.glir.clear()
    assert state_commands({"preset": None, "blend_color": [0, 0, 0, 1]}) is None


def test_visuals_run_the_state_commands_vispy_would(make_canvas, monkeypatch):
    """A visual queues its state from the list made once, less what GL has: GL gets the state
    commands it got from VisPy's set_state after the filter, in the same order (a 2D grid with
    tracers, axes and the colour bar; a 3D grid with leaves, tracers, a body)."""
    if not isolated(__file__, "test_visuals_run_the_state_commands_vispy_would"):
        return
    from nagare.app.gui import canvas as canvas_module
    from nagare.app.gui import gl_state
    from nagare.app.packets import FramePacket
    from vispy.visuals.visual import Visual

    def state_commands_run(skip: bool):
        if not skip:  # VisPy's set_state, not installed again by the new canvas
            monkeypatch.setattr(Visual, "_configure_gl_state", Visual._configure_gl_state.vispy)
            monkeypatch.setattr(canvas_module, "install_visual_state_skip", lambda: None)
        c = make_canvas(420, 320)
        rng = np.random.default_rng(8)
        field = rng.random((40, 56)).astype(np.float32)
        tracers = (rng.random((30, 2)) * [56, 40]).astype(np.float32)
        ran = []
        for seq in range(4):
            if seq == 2:  # after the first frames: what a steady frame runs
                f = c.gl_state()
                inner = f._inner
                f._inner = lambda commands, inner=inner: (ran.extend(x for x in commands if x[0] == "FUNC"),
                                                          inner(commands))[1]
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                      data=field, overlay=tracers, vmin=0.0, vmax=1.0 + seq))
            c.draw_now(finish=True)
        c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True)
        for seq in range(4, 7):
            c.show_packet(_volume_packet(seq, rng))
            c.draw_now(finish=True)
        c.close()
        monkeypatch.undo()
        return ran

    with_skip = state_commands_run(True)
    assert Visual._configure_gl_state is not Visual._configure_gl_state.vispy  # installed by the canvas
    vispy = state_commands_run(False)
    assert len(vispy) > 50
    assert [repr(x) for x in with_skip] == [repr(x) for x in vispy]
    assert gl_state.state_commands({"preset": "opaque"})  # made once, kept


def test_a_failing_lean_hud_renderer_gives_way_to_imgui_bundles(make_canvas, monkeypatch, caplog):
    """Where hud_gl.LeanRenderer fails (its GL entry points on some GL), the HUD says so once and
    draws with imgui-bundle's renderer from the next frame on; the scene is drawn all along."""
    if not isolated(__file__, "test_a_failing_lean_hud_renderer_gives_way_to_imgui_bundles"):
        return
    from nagare.app.gui import hud_gl
    from nagare.app.gui.hud import Hud
    from nagare.app.packets import FramePacket

    def broken():
        raise RuntimeError("no such entry point")

    monkeypatch.setattr(hud_gl, "BareGL", broken)
    c = make_canvas(640, 360)
    c.hud = Hud(c, lambda: ([], {}, "running"), lambda axis, choice: None)
    c.relayout()
    field = np.random.default_rng(2).random((40, 56)).astype(np.float32)
    for seq in range(3):
        c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                  data=field, vmin=0.0, vmax=1.0))
        c.draw_now(finish=True)
    assert isinstance(c.hud.renderer, hud_gl.StockRenderer) and c.hud.frames == 2
    assert caplog.text.count("the HUD's GL renderer failed") == 1 and "no such entry point" in caplog.text
    with_hud, without = c.grab(hud=True), c.grab()
    assert (np.abs(with_hud[:, :300].astype(int) - without[:, :300]).max(axis=-1) > 30).sum() > 500

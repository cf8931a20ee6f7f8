"""App-test fixtures: a real MainWindow (Qt + VisPy on Mesa under Xvfb) and a fake engine family."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from nagare.app.gui.hud import Hud


@pytest.fixture(scope="session")
def _vispy_on_qt():
    """Qt for the window tests (not autouse: the GPU interop test picks VisPy's EGL backend)."""
    vispy = pytest.importorskip("vispy")
    pytest.importorskip("PyQt6")
    vispy.use(app="pyqt6")


@pytest.fixture(scope="session")
def egl():
    """VisPy on its EGL backend with CuPy present (the GPU interop tests), else a skip that says
    why. Run such a file alone: VisPy picks one GL backend per process."""
    import os

    vispy = pytest.importorskip("vispy")
    pytest.importorskip("cupy")
    if os.environ.get("PYOPENGL_PLATFORM") != "egl":
        pytest.skip("set PYOPENGL_PLATFORM=egl and run this file alone (VisPy needs its EGL backend)")
    try:
        vispy.use(app="egl")
    except Exception as exc:
        pytest.skip(f"VisPy's EGL backend is not usable here ({exc}); run this file alone")


@pytest.fixture
def fake_family(monkeypatch):
    """Registers the tests' fake2d family (imported lazily: the registry walk must not see it)."""
    from nagare.engine import families

    from tests.app import fake_engine

    monkeypatch.setitem(families.FAMILIES, "fake2d", "tests.app.fake_engine")
    return fake_engine


@pytest.fixture
def fake_preset(tmp_path, fake_family):
    def write(name="fake", text=""):
        path = tmp_path / f"{name}.toml"
        path.write_text('engine = "fake2d"\ndescription = "fake engine for the app tests"\n' + text)
        return path
    return write


@pytest.fixture
def make_window(qtbot, tmp_path, _vispy_on_qt):
    from nagare.app.gui.window import MainWindow

    made = []

    def make(preset=None, **kw):
        kw.setdefault("output_dir", tmp_path / "out")
        kw.setdefault("backend", "numpy")
        w = MainWindow(None if preset is None else str(preset), **kw)
        qtbot.addWidget(w)
        w.resize(1100, 720)
        w.show()
        qtbot.waitExposed(w)
        w.activateWindow()  # shortcuts (Space, N, R, …) act in the active window
        qtbot.waitUntil(lambda: w.isActiveWindow(), timeout=5000)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
        assert not w.worker.alive, "the simulation thread must stop with the window"


@pytest.fixture
def make_canvas(_vispy_on_qt, qtbot):
    """``make(w, h, **kw)``: a FieldCanvas shown on Xvfb (a hidden Qt canvas has no usable GL
    surface to draw into), closed when the test ends. Tests that draw VisPy text with it run in a
    fresh process (tests/app/frame_check.isolated; _CANVAS_ISOLATION in test_view3d.py)."""
    from nagare.app.gui.canvas import FieldCanvas

    made = []

    def make(w, h, **kw):
        c = FieldCanvas(size=(w, h), show=False, **kw)
        c.show()
        qtbot.waitExposed(c.native)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def headless_hud():
    """A Hud whose _draw runs on a headless imgui context (no renderer, no GL); ``hud.frame()`` draws
    one frame."""
    imgui_bundle = pytest.importorskip("imgui_bundle")
    imgui, implot = imgui_bundle.imgui, imgui_bundle.implot

    emitter = SimpleNamespace(connect=lambda *a, **kw: None)
    canvas = SimpleNamespace(events=SimpleNamespace(mouse_move=emitter, mouse_press=emitter, mouse_release=emitter,
                                                    mouse_wheel=emitter),
                             update=lambda: None, relayout=lambda: None)
    hud = Hud(canvas, lambda: ([], {}, "running"), lambda axis, choice: None)
    hud.ctx = imgui.create_context()
    imgui.set_current_context(hud.ctx)
    hud.plot_ctx = implot.create_context()
    implot.set_current_context(hud.plot_ctx)
    io = imgui.get_io()
    io.set_ini_filename("")
    io.display_size = (1000, 700)
    io.backend_flags |= imgui.BackendFlags_.renderer_has_textures  # the font atlas needs no GL upload

    def frame():
        io.delta_time = 1 / 60
        imgui.new_frame()
        try:
            hud._draw()
        finally:
            imgui.render()

    hud.frame = frame
    yield hud
    implot.destroy_context(hud.plot_ctx)
    imgui.destroy_context(hud.ctx)

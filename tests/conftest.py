"""Shared test set-up: the gpu/slow/gui markers, a visible count of skipped GPU tests, and Qt tests
that skip with a visible reason where no display can be had (instead of Qt aborting the whole run)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from nagare.engine.backend import cupy_available, get_backend

from tests import gl_files

_GPU_OK, _GPU_REASON = cupy_available()
_skipped_gpu: list[str] = []
_skipped_gui: list[str] = []
_gui_problem: list[str] = []  # why the gui tests were skipped (set once, at collection)

# Fixtures that open an OpenGL surface (a VisPy canvas, the main window): they need a real display
# (Xvfb is one); Qt's offscreen platform has no faithful GL, so there they skip.
_GL_FIXTURES = frozenset({"_vispy_on_qt", "make_window", "make_canvas", "egl"})
# Fixtures that need a QApplication but draw nothing with GL (forms, widgets): faithful on Qt's
# offscreen platform, which they get when no display can be had.
_QT_FIXTURES = frozenset({"qapp", "qtbot", "qtmodeltester", "qtlog"})
_NO_DISPLAY_HELP = "install Xvfb (pytest-xvfb starts it) or run in a desktop session"


def _display_problem() -> str | None:
    """None when a Qt window can be opened here; else why not, in one line. Probed in a child process:
    Qt's xcb plugin aborts the process (qFatal) when it cannot reach the display, which no try can
    catch, and pytest-xvfb without an Xvfb to start leaves DISPLAY unset."""
    platform = os.environ.get("QT_QPA_PLATFORM", "").split(":")[0]
    if platform and platform not in ("xcb", "wayland", "wayland-egl"):
        return None  # offscreen, minimal, eglfs…: chosen on purpose; it needs no display server
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return f"no display: DISPLAY is not set and no Xvfb was started; {_NO_DISPLAY_HELP}"
    probe = "import sys; from PyQt6.QtWidgets import QApplication; QApplication(sys.argv[:1])"
    try:
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return f"no usable display: opening a Qt application on {os.environ.get('DISPLAY')!r} hung; {_NO_DISPLAY_HELP}"
    if r.returncode == 0:
        return None
    said = [ln.strip() for ln in r.stderr.splitlines() if ln.strip() and "Fatal Python error" not in ln]
    why = said[0] if said else f"exit status {r.returncode}"
    return f"no usable display ({why}); {_NO_DISPLAY_HELP}"


def _headless_egl(item) -> bool:
    """A test drawn through VisPy's EGL backend (the ``egl`` fixture) with PYOPENGL_PLATFORM=egl: EGL
    renders off screen on the GPU and needs no display server (the GPU machine has none)."""
    return os.environ.get("PYOPENGL_PLATFORM") == "egl" and "egl" in getattr(item, "fixturenames", ())


def _opens_gl(item) -> bool:
    """A test that makes an OpenGL surface on Qt (a display's, or Xvfb's)."""
    return ("gui" in item.keywords or bool(_GL_FIXTURES & set(getattr(item, "fixturenames", ())))) \
        and not _headless_egl(item)


def _skip_qt_without_display(items) -> None:
    gl = [it for it in items if _opens_gl(it)]
    widgets = [it for it in items if it not in gl and _QT_FIXTURES & set(getattr(it, "fixturenames", ()))]
    if not gl and not widgets:
        return
    if gl_files.in_child() and os.environ.get("NAGARE_DISPLAY_CHECKED"):
        return  # a GL file's child: its parent found the display usable (tests/gl_files.py)
    problem = _display_problem()
    if problem is None:
        return
    _gui_problem[:] = [problem]
    skip = pytest.mark.skip(reason=f"gui test: {problem}")
    for item in gl:
        item.add_marker(skip)
        _skipped_gui.append(item.nodeid)
    if widgets:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before pytest-qt creates the QApplication


_gl_runs: list[gl_files.FileRuns] = []  # the parent's (none in a GL file's child)
_config: list = []


def pytest_configure(config):
    os.environ.setdefault("NAGARE_CACHE_DIR", str(config.rootpath / ".pytest_cache" / "nagare"))
    _config[:] = [config]


def _gl_file_item(item) -> bool:
    """GL tests that go to their file's child process (tests/gl_files.py); not the GPU machine's EGL
    tests (each such file runs alone) nor those already in a child."""
    return _opens_gl(item) and "egl" not in getattr(item, "fixturenames", ()) and not gl_files.in_child()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if _gl_runs and _gl_runs[0].owns(item):
        return gl_files.run_protocol(_gl_runs[0], item, nextitem)
    return None


def pytest_runtest_logreport(report):
    if gl_files.in_child() and _config:
        gl_files.write_report(_config[0], report)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason=f"gpu test: no usable CUDA device ({_GPU_REASON})")
    for item in items:
        if "gpu" in item.keywords and not _GPU_OK:
            item.add_marker(skip_gpu)
            _skipped_gpu.append(item.nodeid)
    _skip_qt_without_display(items)


def pytest_collection_finish(session):
    """The GL files' children (tests/gl_files.py), from the items as they will run: after -m, -k,
    --deselect and --lf have taken theirs out."""
    if not gl_files.in_child():
        _gl_runs[:] = [gl_files.FileRuns(session.config, _gl_file_item)]
        _gl_runs[0].collect(session.items)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _skipped_gpu:
        terminalreporter.write_line(
            f"nagare: {len(_skipped_gpu)} gpu-marked tests skipped: no usable CUDA device here "
            f"({_GPU_REASON}); run them on a GPU machine with `pytest -m gpu`.", yellow=True)
    elif _GPU_OK:
        terminalreporter.write_line("nagare: gpu tests ran on a CUDA device.", green=True)
    if _skipped_gui:
        terminalreporter.write_line(f"nagare: {len(_skipped_gui)} gui tests skipped: {_gui_problem[0]}", yellow=True)


@pytest.fixture
def numpy_backend():
    return get_backend("numpy")


@pytest.fixture
def cupy_backend():
    if not _GPU_OK:
        pytest.skip(f"no usable CUDA device ({_GPU_REASON})")
    return get_backend("cupy")


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


def backends_param():
    """[numpy, cupy(gpu-marked)] for parametrising tests over backends."""
    return [pytest.param("numpy", id="numpy"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]

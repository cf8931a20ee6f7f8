"""On the GPU machine (an NVIDIA EGL context): the HUD's lean GL renderer (app/gui/hud_gl.py) finds
its entry points through EGL and draws the pixels imgui-bundle's renderer draws, the HUD and the
scene of the frame after it.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_hud_gl_gpu.py -m gpu -v
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.gui]


def _frames(renderer_cls, monkeypatch):
    from nagare.app.gui import hud_gl
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.hud import Hud
    from nagare.app.packets import FramePacket

    monkeypatch.setattr(hud_gl, "LeanRenderer", renderer_cls)
    history = [SimpleNamespace(wall=0.25 * i, step=10 * i, steps_per_s=40.0, updates_per_s=4e6 + 1e4 * i,
                               gbytes_per_s=1.5, roofline_pct=12.0, phase_ms={"step": 2.0 + 0.1 * (i % 5)})
               for i in range(40)]
    c = FieldCanvas(size=(720, 420), show=False)
    try:
        c.hud = Hud(c, lambda: (history, {}, "running · step 100"), lambda axis, choice: None)
        c.relayout()
        field = np.random.default_rng(4).random((40, 56)).astype(np.float32)
        for seq in range(3):
            c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", fields=("f",),
                                      data=field, vmin=0.0, vmax=1.0 + seq))
            c.draw_now(finish=True)
        shots = [c.grab(hud=True), c.grab()]
        return shots, c.hud.renderer
    finally:
        c.close()
        monkeypatch.undo()


def test_the_lean_hud_renderer_draws_imgui_bundles_pixels_under_egl(egl, monkeypatch):
    from nagare.app.gui import hud_gl

    lean, renderer = _frames(hud_gl.LeanRenderer, monkeypatch)
    assert isinstance(renderer, hud_gl.LeanRenderer), "the lean renderer failed and gave way"
    assert renderer.gl_calls <= 50
    stock, _ = _frames(hud_gl.StockRenderer, monkeypatch)
    assert (np.abs(lean[0][:, :300].astype(int) - lean[1][:, :300]).max(axis=-1) > 30).sum() > 500  # HUD drawn
    for a, b in zip(stock, lean):
        np.testing.assert_array_equal(a, b)

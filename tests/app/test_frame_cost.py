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

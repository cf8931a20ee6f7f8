"""dock.field_origin: the field right of the docked HUD or under it, whichever shows it larger."""
from __future__ import annotations

import pytest
from nagare.app.gui.dock import field_origin

CANVAS = (1000.0, 700.0)
HUD = (340.0, 390.0)  # the HUD's column, as tall as its content


def shown_scale(origin, aspect, right=0.0, strips=(0.0, 0.0)):
    left, top = origin
    vw, vh = CANVAS[0] - left - right - strips[0], CANVAS[1] - top - strips[1]
    return min(vw / aspect, vh)


@pytest.mark.parametrize("aspect", [0.2, 0.5, 1.0, 1.5, 2.5, 6.0])
@pytest.mark.parametrize("hud_h", [22.0, 200.0, 390.0, 650.0, 700.0])
def test_the_field_takes_the_region_that_shows_it_larger(aspect, hud_h):
    right, strips = 100.0, (89.0, 43.0)
    got = field_origin(CANVAS, (HUD[0], hud_h), aspect, right, strips)
    assert got in ((HUD[0], 0.0), (0.0, hud_h))
    other = (0.0, hud_h) if got == (HUD[0], 0.0) else (HUD[0], 0.0)
    assert shown_scale(got, aspect, right, strips) >= shown_scale(other, aspect, right, strips)


def test_a_wide_channel_goes_under_a_short_hud_and_a_tall_field_beside_it():
    assert field_origin(CANVAS, HUD, 2.5) == (0.0, HUD[1])
    assert field_origin(CANVAS, HUD, 0.4) == (HUD[0], 0.0)
    # a HUD the whole height (before its first frame measured it, or a small window): beside
    assert field_origin(CANVAS, (HUD[0], CANVAS[1]), 2.5) == (HUD[0], 0.0)
    # collapsed to its title strip: under it, the whole width
    assert field_origin(CANVAS, (HUD[0], 22.0), 1.0) == (0.0, 22.0)


def test_a_tie_keeps_the_field_beside_the_hud_and_no_hud_keeps_the_whole_canvas():
    # beside: min((1000 - 500) / 1, 700) = 500; under: min(1000, 700 - 200) = 500
    assert field_origin(CANVAS, (500.0, 200.0), 1.0) == (500.0, 0.0)
    assert field_origin(CANVAS, None, 2.5) == (0.0, 0.0)
    assert field_origin(CANVAS, (0.0, 0.0), 2.5) == (0.0, 0.0)
    assert field_origin(CANVAS, HUD, 0.0) == field_origin(CANVAS, HUD, 1.0)  # no aspect: a square


def test_content_without_an_aspect_takes_the_larger_area():
    """A profile's plot stretches to its region: a flat range (y a tenth of x) must not squeeze it
    into the strip under a tall HUD; it takes the larger region."""
    canvas, hud = (1100.0, 720.0), (320.0, 600.0)
    beside_area = (1100.0 - 320.0) * 720.0
    under_area = 1100.0 * (720.0 - 600.0)
    assert beside_area > under_area
    assert field_origin(canvas, hud, None) == (320.0, 0.0)
    assert field_origin(canvas, (320.0, 100.0), None) == (0.0, 100.0)  # a short HUD: under it is larger
    assert field_origin(canvas, hud, 10.0) == (0.0, 600.0)  # (with the aspect kept, the strip would win)


def test_a_hud_that_cannot_start_gives_its_room_back_at_once(monkeypatch):
    """imgui-bundle missing (or GL too old): the HUD says why once and the field is laid out again
    over the whole canvas, not after the next resize."""
    import builtins
    from types import SimpleNamespace

    from nagare.app.gui.hud import WIDTH, Hud

    emitter = SimpleNamespace(connect=lambda *a, **kw: None)
    laid_out = []
    canvas = SimpleNamespace(events=SimpleNamespace(mouse_move=emitter, mouse_press=emitter, mouse_release=emitter,
                                                    mouse_wheel=emitter),
                             update=lambda: None, relayout=lambda: laid_out.append(1), size=(1000, 700))
    hud = Hud(canvas, lambda: ([], {}, "running"), lambda axis, choice: None)
    assert hud.footprint() == (WIDTH, 700.0)  # before its first frame: the whole height
    real_import = builtins.__import__

    def no_imgui(name, *a, **kw):
        if name.startswith("imgui_bundle"):
            raise ImportError("No module named 'imgui_bundle'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_imgui)
    assert hud._ensure() is False
    assert "HUD unavailable" in hud.error and laid_out == [1]
    assert hud.footprint() is None

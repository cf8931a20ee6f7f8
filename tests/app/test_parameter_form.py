"""The parameter form of issue 18's new-user walk: it shows the knobs the running preset's equation
reads (as the preset model declares them: no Reynolds or Mach number for 1D advection) and
every editor wide enough to read its value in the docked panel (amr3d-ahmed's derived τ)."""
from __future__ import annotations

import pytest
from nagare.engine.presets import load_preset, raw_dict, validate

NS_KNOBS = [("physics", k) for k in ("reynolds", "mach", "flow_angle", "prandtl", "gamma", "viscous", "filter")]
NS_KNOBS += [("boundaries", k) for k in ("west", "east", "south", "north", "sigma")]


def _shown(form, key) -> bool:
    w, _ = form.editors[key]
    return not w.isHidden() and form.form.isRowVisible(w)


@pytest.mark.parametrize("name", ["compact-advection1d", "compact-square1d"])
def test_1d_advection_shows_no_navier_stokes_knobs(qtbot, name):
    from nagare.app.gui.window import ParameterForm

    p = load_preset(name, backend="numpy")
    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(p)
    hidden = [k for k in NS_KNOBS if _shown(form, k)]
    assert not hidden, f"{name} shows Navier–Stokes knobs: {hidden}"
    for key in [("physics", "speed"), ("physics", "dt"), ("physics", "scheme"), ("grid", "nx"),
                ("boundaries", "kind")]:
        assert _shown(form, key), key
    assert not _shown(form, ("physics", "omega"))  # the rotating cone's


def test_navier_stokes_shows_its_knobs_and_the_form_follows_an_edited_problem(qtbot):
    from nagare.app.gui.window import ParameterForm

    p = load_preset("compact-vortex-outflow", backend="numpy")
    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(p)
    assert all(_shown(form, k) for k in NS_KNOBS)
    assert not _shown(form, ("physics", "speed")) and not _shown(form, ("boundaries", "kind"))
    problem, _ = form.editors[("physics", "problem")]
    problem.setCurrentText("rotation2d")  # the form follows the edit before it is applied
    assert _shown(form, ("physics", "omega")) and not _shown(form, ("physics", "mach"))
    problem.setCurrentText("navier-stokes")
    # hidden knobs keep their values: the form's preset is the one loaded, unchanged
    assert validate(form.values(), p.source, "numpy").physics.mach == p.physics.mach


def test_the_hook_is_the_models_own_declaration():
    """inapplicable_keys reads applies_when() declarations only: a family without any hides nothing."""
    wave = load_preset("wave2d", backend="numpy")
    assert type(wave).inapplicable_keys(raw_dict(wave)) == set()
    adv = load_preset("compact-advection1d", backend="numpy")
    keys = type(adv).inapplicable_keys(raw_dict(adv))
    assert set(NS_KNOBS) <= keys and ("physics", "speed") not in keys


LBM_OBSTACLE = [("obstacle", k) for k in ("center", "diameter", "width", "height", "path", "threshold")]


def test_lbm2d_form_hides_the_knobs_its_boundaries_and_obstacle_do_not_read(qtbot):
    """The walk: lbm2d-cavity showed nx, ny beside n, the inlet velocity and an obstacle's geometry
    with kind = none; lbm2d-cylinder the lid velocity and a rectangle's width and height."""
    from nagare.app.gui.window import ParameterForm

    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(load_preset("lbm2d-cavity", backend="numpy"))
    gone = [("grid", "nx"), ("grid", "ny"), ("physics", "inlet_velocity"), *LBM_OBSTACLE]
    assert [k for k in gone if _shown(form, k)] == []
    for key in [("grid", "n"), ("physics", "lid_velocity"), ("physics", "reynolds"), ("obstacle", "kind")]:
        assert _shown(form, key), key
    cyl = load_preset("lbm2d-cylinder", backend="numpy")
    form.load(cyl)
    assert not any(_shown(form, k) for k in [("physics", "lid_velocity"), ("obstacle", "width"),
                                              ("obstacle", "height"), ("obstacle", "path")])
    for key in [("grid", "nx"), ("grid", "ny"), ("physics", "inlet_velocity"), ("obstacle", "center"),
                ("obstacle", "diameter")]:
        assert _shown(form, key), key
    kind, _ = form.editors[("obstacle", "kind")]
    kind.setCurrentText("rectangle")  # the form follows the edit before it is applied
    assert _shown(form, ("obstacle", "width")) and _shown(form, ("obstacle", "height"))
    assert not _shown(form, ("obstacle", "diameter"))
    kind.setCurrentText("circle")
    assert validate(form.values(), cyl.source, "numpy").obstacle.width == cyl.obstacle.width  # kept as loaded


def test_the_smagorinsky_constant_shows_only_with_its_model():
    """amr3d: C_s is read only by les = smagorinsky (csm computes its coefficient per point)."""
    key = ("physics", "smagorinsky")
    sphere = load_preset("amr3d-sphere-re100", backend="numpy")  # les = none
    assert key in type(sphere).inapplicable_keys(raw_dict(sphere))
    smag = raw_dict(sphere)
    smag["physics"]["les"] = "smagorinsky"
    assert key not in type(sphere).inapplicable_keys(smag)
    csm = raw_dict(sphere)
    csm["physics"]["les"] = "csm"
    assert key in type(sphere).inapplicable_keys(csm)
    ahmed = load_preset("amr3d-ahmed", backend="numpy")  # les = csm
    assert key in type(ahmed).inapplicable_keys(raw_dict(ahmed))


def test_a_key_the_values_leave_out_counts_as_its_default():
    """A preset that does not name physics.les runs with les = "none": C_s does not apply. A compact
    preset that does not name physics.problem is advection1d: its speed applies, Mach does not."""
    from nagare.engine.amr3d.config import AMR3DPreset
    from nagare.engine.compact.config import CompactPreset

    assert ("physics", "smagorinsky") in AMR3DPreset.inapplicable_keys({"physics": {}})
    assert ("physics", "smagorinsky") not in AMR3DPreset.inapplicable_keys({"physics": {"les": "smagorinsky"}})
    keys = CompactPreset.inapplicable_keys({})
    assert ("physics", "speed") not in keys and ("physics", "mach") in keys


def test_ahmed_tau_editor_shows_its_whole_value_in_the_docked_form(make_window):
    """amr3d-ahmed's τ (derived from Re: 0.5000001398601399) was cut off: a narrow editor beside a
    long label, in a form wider than its dock. Now every editor lies inside the panel and τ's
    editor is wide enough for its whole value."""
    from PyQt6 import QtWidgets

    w = make_window("amr3d-ahmed")
    form = w.params
    viewport = form.form_host.parentWidget()
    QtWidgets.QApplication.processEvents()
    tau, _ = form.editors[("physics", "tau")]
    text = tau.text()
    assert text.startswith("0.5") and len(text) > 12
    need = tau.fontMetrics().horizontalAdvance(text)
    assert tau.width() - 10 >= need, (tau.width(), need)
    assert tau.cursorPosition() == 0  # the value's start is what shows
    for key, (ed, _) in form.editors.items():
        if ed.isHidden():
            continue
        right = ed.mapTo(viewport, ed.rect().topRight()).x()
        assert right <= viewport.width(), f"{key} is cut off at the panel's edge ({right} > {viewport.width()})"

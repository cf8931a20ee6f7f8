"""A value typed into the Parameters form and refused is blamed on the form, not on the preset file
(the walkthrough saw "…/compact-rotating-cone.toml: physics.dt: got -5"), and its field gets the focus."""
from __future__ import annotations


def test_a_refused_form_value_names_the_form_field(make_window, qtbot, fake_preset):
    path = fake_preset()
    w = make_window(path)
    qtbot.waitUntil(lambda: w.worker.engine is not None, timeout=5000)
    nu_edit, _ = w.params.editors[("physics", "nu")]
    nu_edit.setText("0.9")
    w.preset_list.setFocus()
    assert not w.apply_parameters()
    text = w.last_error_box.text()
    assert text.startswith(f"Parameters form (applied to {w.preset.source}): physics.nu: got 0.9"), text
    qtbot.waitUntil(nu_edit.hasFocus, timeout=3000)

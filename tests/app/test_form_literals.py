"""The parameter form shows every preset value as a TOML literal and reads it back unchanged:
booleans, tuples of booleans, strings with quotes, lists of tables (amr3d's [[refine]] boxes)."""
from __future__ import annotations

import tomllib

import pytest

pytest.importorskip("PyQt6", reason="the window needs PyQt6 (the GPU machine has none)")
from nagare.app.gui.window import _toml_literal
from nagare.engine.presets import load_preset


@pytest.mark.parametrize("value", [True, [True, False, True], (0.25, 0.5), 'say "hi" \\ there', 3, 1e-5,
                                   [{"lo": [0.0, 0.0, 0.0], "hi": [0.5, 0.5, 0.5], "level": 1}]])
def test_literal_round_trips(value):
    want = list(value) if isinstance(value, tuple) else value
    assert tomllib.loads(f"v = {_toml_literal(value)}")["v"] == want


def test_every_field_of_the_tree_preset_round_trips():
    p = load_preset("amr3d-periodic")
    assert tomllib.loads(f"v = {_toml_literal(p.grid.periodic)}")["v"] == [True, True, True]
    boxes = tomllib.loads(f"v = {_toml_literal(p.refine)}")["v"]
    assert boxes == [r.model_dump(mode='json') for r in p.refine]


def test_editing_reynolds_rederives_tau_in_the_form(qtbot):
    """The form shows amr3d's τ derived from flow.reynolds; editing Re alone must not send the old τ
    back (it would contradict the new Re), while an edited τ is sent and refused in one line."""
    from nagare.app.gui.window import ParameterForm
    from nagare.engine.errors import NagareError
    from nagare.engine.presets import validate

    p = load_preset("amr3d-sphere-re20", backend="numpy")
    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(p)
    tau_edit, _ = form.editors[("physics", "tau")]
    re_edit, _ = form.editors[("flow", "reynolds")]
    assert "flow.reynolds" in tau_edit.toolTip()
    re_edit.setText("200.0")
    new = validate(form.values(), p.source, "numpy")
    assert new.flow.reynolds == 200.0
    assert new.physics.tau < p.physics.tau  # re-derived: ν ∝ 1/Re
    tau_edit.setText("0.6")  # both edited: the loader says which contradicts which
    with pytest.raises(NagareError, match="contradicts flow.reynolds"):
        validate(form.values(), p.source, "numpy")


def test_an_edited_stl_path_is_not_held_to_the_old_mesh_hash(qtbot, tmp_path):
    """The STL body's mesh hash is derived from the file: the form never sends it back, so pointing
    the body at another mesh works (the stored hash only guards checkpoints)."""
    import shutil

    from nagare.app.gui.window import ParameterForm, _toml_literal
    from nagare.engine.presets import PRESET_DIR, validate

    p = load_preset("amr3d-stl", backend="numpy")
    other = tmp_path / "other.stl"
    shutil.copy(PRESET_DIR / "amr3d-stl" / "body.stl", other)
    with open(other, "a") as fh:
        fh.write("\n")  # the same mesh, other bytes: another hash
    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(p)
    body_edit, _ = form.editors[("body",)]
    bodies = [b.model_dump(mode="json") for b in p.body]
    bodies[0]["path"] = str(other)
    body_edit.setText(_toml_literal(bodies))
    new = validate(form.values(), p.source, "numpy")
    assert new.body[0].path == str(other) and new.body[0].mesh_sha256 != p.body[0].mesh_sha256

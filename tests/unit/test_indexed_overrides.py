"""``--set body[0].diameter=…``: an index in an override key edits that element of a list of tables
(the amr3d presets advertise body[0].diameter/level/band as knobs), on the CPU variant (its
[cpu_overrides] body) and the GPU one alike; a bad index or key is blamed on the --set option."""
from __future__ import annotations

import pytest
from nagare.engine.amr3d import bodies
from nagare.engine.errors import PresetError
from nagare.engine.presets import apply_overrides, load_preset, parse_override


def test_an_indexed_key_parses_to_a_path_with_an_integer():
    assert parse_override("body[0].diameter=0.1") == (["body", 0, "diameter"], 0.1)
    assert parse_override("a.b[2][1]=3") == (["a", "b", 2, 1], 3)


def test_an_indexed_override_edits_only_that_element():
    raw = {"body": [{"kind": "sphere", "level": 2}, {"kind": "box", "level": 1}]}
    out = apply_overrides(raw, ["body[1].level=3"])
    assert out["body"] == [{"kind": "sphere", "level": 2}, {"kind": "box", "level": 3}]
    assert raw["body"][1]["level"] == 1


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
@pytest.mark.parametrize("diameter", [0.1, 3.0])
def test_the_sphere_diameter_knob_is_accepted_on_cpu_and_gpu(backend, diameter):
    preset = load_preset("amr3d-sphere-re20", [f"body[0].diameter={diameter}"], backend=backend)
    assert len(preset.body) == 1 and preset.body[0].diameter == diameter
    # the CPU run keeps its own [cpu_overrides] body (level 2), edited; the GPU one the file's (level 4)
    assert preset.body[0].level == (2 if backend == "numpy" else 4)


def test_the_sub_cell_check_then_refuses_a_tiny_sphere_and_accepts_a_large_one():
    tiny = load_preset("amr3d-sphere-re20", ["body[0].diameter=0.1"], backend="numpy")
    with pytest.raises(PresetError) as exc:
        bodies.check_resolved([bodies.make(b, ".") for b in tiny.body], tiny.body, "p.toml")
    assert "body[0].diameter: got 0.1" in str(exc.value) and "\n" not in str(exc.value)
    large = load_preset("amr3d-sphere-re20", ["body[0].diameter=3.0"], backend="numpy")
    bodies.check_resolved([bodies.make(b, ".") for b in large.body], large.body, "p.toml")


def test_the_ahmed_level_knob_is_accepted_on_cpu():
    assert load_preset("amr3d-ahmed", ["body[0].level=3"], backend="numpy").body[0].level == 3


@pytest.mark.parametrize("override, words", [
    ("body[3].diameter=1", "'body' has 1 item (indices 0 to 0)"),
    ("grid[0].m=3", "'grid' is not a list"),
    ("body.diameter=2", "'body' is a list of tables; name an item, e.g. body[0].diameter"),
])
@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_a_bad_index_is_blamed_on_the_set_option(override, words, backend):
    with pytest.raises(PresetError) as exc:
        load_preset("amr3d-sphere-re20", [override], backend=backend)
    msg = str(exc.value)
    assert msg.startswith(f"--set {override}"), msg
    assert words in msg, msg


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_an_unknown_key_below_an_index_is_blamed_on_the_set_option(backend):
    with pytest.raises(PresetError) as exc:
        load_preset("amr3d-sphere-re20", ["body[0].diamter=1"], backend=backend)
    msg = str(exc.value)
    assert msg.startswith("--set body[0].diamter=1 (on "), msg
    assert "unknown key" in msg, msg

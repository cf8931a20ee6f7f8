"""The parameter form shows every preset value as a TOML literal and reads it back unchanged:
booleans, tuples of booleans, strings with quotes, lists of tables (amr3d's [[refine]] boxes)."""
from __future__ import annotations

import tomllib

import pytest
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

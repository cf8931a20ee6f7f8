"""amr3d bodies smaller than the lattice they sit on (issue 40): a body must span at least
bodies.MIN_SPACINGS spacings of its level across its thinnest extent, every kind; less is refused in
one line naming the preset key, the body's size, the spacing at its level and the smallest level
that resolves it (or how large it must be where no level does). The shipped presets pass."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trimesh
from nagare.engine.amr3d import bodies
from nagare.engine.amr3d.config import Body as BodySpec
from nagare.engine.errors import PresetError
from nagare.engine.presets import load_preset

REPO = Path(__file__).resolve().parents[2]


def refusal(spec, base="."):
    with pytest.raises(PresetError) as exc:
        bodies.check_resolved([bodies.make(spec, base)], [spec], "p.toml")
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("spec, key, level_words", [
    # the issue's sphere: D = 0.1 at level 2 (spacing 0.25); no level up to 4 resolves it
    (dict(kind="sphere", diameter=0.1, level=2), "body[0].diameter", "make body[0].diameter at least 0.25"),
    (dict(kind="sphere", diameter=0.5, level=1), "body[0].diameter", "body[0].level = 3 resolves it"),
    # the issue's Ahmed body: length 0.01; its thinnest extent is its height, 288/1044 of it
    (dict(kind="ahmed", length=0.01, level=3), "body[0].length", "make body[0].length at least 0.9063"),
    (dict(kind="ahmed", length=4.0, level=1), "body[0].length", "body[0].level = 2 resolves it"),
    (dict(kind="box", size=(4.0, 4.0, 0.5), level=1), "body[0].size", "body[0].level = 3 resolves it"),
    (dict(kind="box", size=(4.0, 0.1, 4.0), level=0), "body[0].size", "body[0].size at least 0.25 along y"),
    (dict(kind="cylinder", diameter=0.5, length=6.0, level=0), "body[0].diameter", "body[0].level = 3"),
    (dict(kind="cylinder", diameter=6.0, length=0.5, level=2), "body[0].length", "body[0].level = 3"),
])
def test_a_body_thinner_than_four_spacings_is_refused_in_one_line(spec, key, level_words):
    msg = refusal(BodySpec(center=(8.0, 8.0, 8.0), **spec))
    assert msg.startswith(f"p.toml: {key}: got "), msg
    assert f"of its level {spec['level']} (spacing {2.0 ** -spec['level']:g})" in msg, msg
    assert "at least 4 spacings" in msg and level_words in msg, msg


def test_a_mesh_body_is_measured_after_scaling(tmp_path):
    """An STL body: its thinnest extent after scaling to `length` (a 1 × 2 × 4 brick at length 4 is
    1 thick): level 1 (0.5) is 2 spacings, level 2 (0.25) is 4."""
    trimesh.creation.box(extents=(1.0, 2.0, 4.0)).export(tmp_path / "brick.stl")
    spec = BodySpec(kind="stl", center=(8.0, 8.0, 8.0), length=4.0, level=1, path="brick.stl")
    msg = refusal(spec, str(tmp_path))
    assert "body[0].length: got 4.0" in msg and "1 level-0 units across at its thinnest (x)" in msg, msg
    assert "body[0].level = 2 resolves it" in msg, msg
    ok = spec.model_copy(update={"level": 2})
    bodies.check_resolved([bodies.make(ok, str(tmp_path))], [ok], "p.toml")


@pytest.mark.parametrize("spec", [
    dict(kind="sphere", diameter=2.0, level=1),          # exactly 4 spacings: the tests' small sphere
    dict(kind="box", size=(1.0, 1.0, 1.0), level=2),
    dict(kind="cylinder", diameter=1.0, length=0.25, level=4),
])
def test_four_spacings_are_enough(spec):
    s = BodySpec(center=(8.0, 8.0, 8.0), **spec)
    bodies.check_resolved([bodies.make(s)], [s], "p.toml")


def test_the_second_body_is_named_by_its_index():
    specs = [BodySpec(kind="sphere", center=(8.0, 8.0, 8.0), diameter=2.0, level=2),
             BodySpec(kind="sphere", center=(4.0, 4.0, 4.0), diameter=0.3, level=2)]
    with pytest.raises(PresetError, match=r"body\[1\]\.diameter: got 0\.3;.*body\[1\]\.level = 4"):
        bodies.check_resolved([bodies.make(s) for s in specs], specs, "p.toml")


@pytest.mark.parametrize("path", sorted(glob.glob(str(REPO / "presets" / "amr3d-*.toml"))))
@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_the_shipped_presets_resolve_their_bodies(path, backend):
    """Their full (GPU) size and their NumPy preview (cpu_overrides) both."""
    p = load_preset(os.path.basename(path)[:-5], [], backend=backend)
    made = [bodies.make(s, os.path.dirname(os.path.abspath(p.source))) for s in p.body]
    bodies.check_resolved(made, p.body, p.source)


def test_the_cli_refuses_the_issues_sphere_with_exit_2():
    r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "amr3d-sphere-re20", "--backend", "numpy",
                        "--steps", "1", "--quiet", "--set",
                        "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=0.1, level=2, band=0.5}]"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "body[0].diameter: got 0.1" in lines[0] and "spacing 0.25" in lines[0], lines[0]

"""Presets: every shipped preset validates; every broken one is refused with one line, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from nagare.app.cli import main
from nagare.engine.errors import PresetError
from nagare.engine.presets import apply_overrides, load_preset, load_raw, preset_names, resolve_path

BROKEN = Path(__file__).parent / "broken_presets"
BROKEN_FILES = sorted(p for p in BROKEN.glob("*.toml") if p.name != "cycle_b.toml")


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_shipped_presets_validate(name, backend):
    p = load_preset(name, backend=backend)
    assert p.description and "\n" not in p.description
    assert p.content_hash


@pytest.mark.parametrize("path", BROKEN_FILES, ids=lambda p: p.stem)
def test_broken_preset_is_one_line_exit_2(path, capsys):
    status = main(["run", str(path), "--steps", "1", "--backend", "numpy", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("nagare: ")
    assert "Traceback" not in err
    assert path.name in err or "cycle_" in err, err


@pytest.mark.parametrize("path,key,fragment", [
    ("unknown_key.toml", "grid.nxx", "allowed keys here: nx, ny, nz, dx"),
    ("wrong_type.toml", "grid.nx", "'big'"),
    ("out_of_range.toml", "grid.nx", "greater than or equal to 3"),
    ("r_unstable.toml", "physics.r", "less than or equal to"),
    ("bad_enum.toml", "boundaries.kind", "'periodic' or 'fixed'"),
    ("malformed.toml", None, "not valid TOML"),
    ("missing_engine.toml", "engine", "required key is missing"),
    ("unknown_engine.toml", "engine", "allowed: diffusion3d"),
    ("cycle_a.toml", "extends", "extends cycle"),
    ("extends_missing.toml", "extends", "no such preset"),
    ("bad_variant_choice.toml", "variants.kernel", "allowed: array, stencil-host, cuda, cuda-autotune"),
    ("bad_cpu_override.toml", "cpu_overrides.grid.nx", "-4"),
    ("fixed_mode_zero.toml", None, "every sine mode number must be ≥ 1"),
])
def test_error_names_key_value_and_allowed(path, key, fragment):
    with pytest.raises(PresetError) as info:
        load_preset(BROKEN / path, backend="cupy")
    msg = str(info.value)
    assert path in msg
    if key:
        assert f": {key}" in msg, msg
    assert fragment in msg, msg


def test_missing_file_lists_known_presets():
    with pytest.raises(PresetError, match="no such preset file or name; known presets: .*diffusion3d"):
        resolve_path("no-such-preset")


def test_extends_merges_and_child_wins():
    raw = load_raw(resolve_path("diffusion3d-thin"))
    assert raw["grid"]["nx"] == 8 and raw["physics"]["kappa"] == 1.0  # from the child / the parent
    assert raw["description"].startswith("3D diffusion on the thin")


def test_set_overrides_are_typed_toml_values():
    raw = apply_overrides({"grid": {"nx": 4}}, ["grid.nx=128", "physics.precision=fp64", "initial.mode=[1,2,3]"])
    assert raw == {"grid": {"nx": 128}, "physics": {"precision": "fp64"}, "initial": {"mode": [1, 2, 3]}}
    p = load_preset("diffusion3d", ["grid.nx=40", "physics.precision=fp64"], backend="cupy")
    assert p.grid.nx == 40 and p.physics.precision == "fp64"


def test_bad_set_override_is_one_line(capsys):
    assert main(["run", "diffusion3d", "--set", "grid.nx=-1", "--steps", "1", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "grid.nx" in err and "-1" in err


def test_cpu_overrides_apply_on_numpy_only():
    assert load_preset("diffusion3d", backend="numpy").grid.nx == 64
    assert load_preset("diffusion3d", backend="cupy").grid.nx == 256


def test_no_traceback_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('engine = "diffusion3d"\ndescription = "x"\n[grid]\nnx = "many"\n')
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", str(bad), "--backend", "numpy"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "bad.toml: grid.nx: got 'many'" in proc.stderr


@pytest.mark.parametrize("path,key", [("float_for_int.toml", "grid.nx"), ("bool_for_int.toml", "grid.nx"),
                                      ("inf_value.toml", "initial.amplitude"), ("string_for_float.toml", "physics.r")])
def test_values_are_never_coerced(path, key):
    with pytest.raises(PresetError, match=rf"{path}: {key}: got "):
        load_preset(BROKEN / path)


def test_extending_file_beats_inherited_cpu_overrides(tmp_path):
    child = tmp_path / "mine.toml"
    child.write_text('extends = "diffusion3d"\ndescription = "mine"\n[grid]\nnx = 32\nny = 32\nnz = 32\n')
    p = load_preset(child, backend="numpy")
    assert (p.grid.nx, p.grid.ny, p.grid.nz) == (32, 32, 32)
    assert load_preset(child, ["grid.nx=20"], backend="numpy").grid.nx == 20  # --set still wins


def test_variant_error_names_the_axis_not_the_type(tmp_path):
    bad = tmp_path / "v.toml"
    bad.write_text('engine = "diffusion3d"\ndescription = "x"\n[variants]\nkernel = 1.5\n')
    with pytest.raises(PresetError) as info:
        load_preset(bad)
    assert "v.toml: variants.kernel: got 1.5" in str(info.value)

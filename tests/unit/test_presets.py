"""Presets: every shipped preset validates; every broken one is refused with one line, exit 2."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from nagare.app.cli import main
from nagare.engine.errors import PresetError
from nagare.engine.presets import (
    apply_overrides,
    load_preset,
    load_raw,
    preset_names,
    raw_dict,
    resolve_path,
    validate,
)

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
    ("unknown_engine.toml", "engine", "unknown engine family; allowed: "),
    ("cycle_a.toml", "extends", "extends cycle"),
    ("extends_missing.toml", "extends", "no such preset"),
    ("bad_variant_choice.toml", "variants.kernel", "allowed: array, stencil-host, cuda, cuda-autotune"),
    ("bad_cpu_override.toml", "cpu_overrides.grid.nx", "-4"),
    ("fixed_mode_zero.toml", None, "every sine mode number must be ≥ 1"),
    ("engine_is_list.toml", "engine", "expected the name of an engine family (a string)"),
    ("sph_dt_fixed_too_large.toml", None, "exceeds the acoustic limit 0.5·h/c0"),
    ("sph_dt_fixed_huge.toml", None, "exceeds the acoustic limit 0.5·h/c0"),
    ("engine_is_table.toml", "engine", "got {'a': 1}; expected the name of an engine family"),
    ("wave2d_denormal_dx.toml", "grid.dx", "greater than or equal to 1e-12"),
    ("wave2d_huge_dx.toml", "grid.dx", "less than or equal to 1e+12"),
    ("wave2d_huge_c.toml", "physics.c", "less than or equal to 1e+12"),
    ("tiny_kappa.toml", "physics.kappa", "greater than or equal to 1e-12"),
    ("subnormal_in_tuple.toml", "physics.force", "subnormal"),
    ("obstacle_centre_outside.toml", "obstacle.center", "lies outside the domain"),
    ("obstacle_huge_diameter.toml", None, "obstacle.diameter = 1e+09 does not fit the 64×64 grid"),
    ("obstacle_no_node.toml", None, "at least 1 node"),
    ("rectangle_too_tall.toml", None, "obstacle.height = 40 does not fit the 64×32 grid"),
    ("grid_n_and_nx.toml", "grid", "grid.n = 64 and grid.nx = 128 both given"),
    ("tracers_outside.toml", "tracers.line", "lies outside the domain"),
    ("sph_obstacle_outside.toml", None, "does not lie inside the 2.0 × 0.67 tank floor"),
    ("compact_dt_above_rk4_limit.toml", None, "physics.dt = 1e+06 exceeds the RK4 stability limit 0.0222"),
    ("compact_cone_dt_above_limit.toml", None, "physics.dt = 0.01 exceeds the RK4 stability limit 0.0073"),
    ("compact_ns_reynolds_tiny.toml", None, "viscous 2.77e-12 at reynolds = 1e-06"),
    ("compact_ns_center_outside.toml", None, "initial.center = [1000000.0, 1000000.0] lies outside the domain "
                                             "[-1, 1] × [-1, 1]"),
    ("compact_box_inverted.toml", None, "initial.box = [0.5, -0.5, 0.6, 0.4] is [x0, x1, y0, y1] with x1 > x0"),
    ("compact_box_off_grid.toml", None, "initial.box: [0.001, 0.002] along x covers no grid point"),
    ("compact_sine_mode_beyond_nyquist.toml", None, "initial.mode = 100000 is not a wave this grid resolves: "
                                                    "16 points along x hold 1 … 7 periods"),
    ("diffusion3d_parts_too_many.toml", None, "decomp.parts = 9: grid.nz = 8 z planes cannot be split into 9"),
])
def test_error_names_key_value_and_allowed(path, key, fragment):
    with pytest.raises(PresetError) as info:
        load_preset(BROKEN / path, backend="cupy")
    msg = str(info.value)
    assert path in msg
    if key:
        assert f": {key}" in msg, msg
    assert fragment in msg, msg


def test_a_refusal_of_the_whole_file_reads_as_said_of_the_file():
    """With no key and no value to name, the message follows the file name after a colon
    ("malformed.toml: is not valid TOML …"), not a semicolon."""
    with pytest.raises(PresetError) as info:
        load_preset(BROKEN / "malformed.toml", backend="numpy")
    assert str(info.value).startswith(f"{info.value.source}: is not valid TOML ("), str(info.value)
    with pytest.raises(PresetError, match=r"^no-such-preset: no such preset file or name; known presets: "):
        resolve_path("no-such-preset")


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
    # the --set is named as the cause (not the file, which is fine), with the preset it was applied to
    assert err.startswith("nagare: --set grid.nx=-1 (on ") and "diffusion3d.toml" in err


def test_a_bad_set_on_a_numpy_run_names_the_key_as_typed(capsys):
    """On NumPy a --set lands on the preset's [cpu_overrides] variant; the refusal named the key
    cpu_overrides.grid.nx, a key the user did not type, whose value in the file is another."""
    assert main(["run", "lbm2d-cylinder", "--set", "grid.nx=1", "--steps", "1", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nagare: --set grid.nx=1 (on ") and ": grid.nx: got 1; expected greater than or " \
        "equal to 4" in err and "cpu_overrides" not in err, err


def test_a_bad_value_from_the_file_names_the_file_not_an_innocent_set(tmp_path):
    """A --set of a neighbouring key (grid.nx) is not blamed for the file's own bad grid.dx."""
    bad = tmp_path / "bad.toml"
    bad.write_text(resolve_path("diffusion3d").read_text().replace("dx = 1.0", "dx = -2.0", 1))
    with pytest.raises(PresetError) as exc:
        load_preset(bad, ["grid.nx=40", "grid.ny=40"], backend="numpy")
    assert "grid.dx" in str(exc.value) and "--set" not in str(exc.value) and "bad.toml" in str(exc.value)
    with pytest.raises(PresetError) as exc:  # a --set of the table above the bad key is its cause
        load_preset("diffusion3d", ["grid={nx = 8, ny = 8, nz = 8, dx = -1.0}"], backend="numpy")
    assert str(exc.value).startswith("--set grid={nx") and "grid.dx" in str(exc.value)


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


@pytest.mark.parametrize("value", ["[1]", "{a=1}", '["lbm2d"]', "3"])
def test_set_engine_to_a_non_string_is_one_line(value, capsys):
    assert main(["run", "diffusion3d", "--set", f"engine={value}", "--steps", "1", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "engine: got" in err and "(a string)" in err, err
    assert "Traceback" not in err and "unhashable" not in err


@pytest.mark.parametrize("overrides,fragment", [
    (["grid.n=64", "grid.ny=32"], "grid.n = 64 and grid.ny = 32 both given"),
    (["obstacle.kind='circle'", "obstacle.center=[0.5, -0.1]"], "obstacle.center"),
    (["obstacle.kind='rectangle'", "obstacle.width=1e9"], "obstacle.width"),
    (["tracers.points=[[0.5, 1.5]]"], "tracers.points"),
    (["physics.lid_velocity=1e-320"], "subnormal"),
])
def test_nonsense_lbm2d_overrides_are_refused(overrides, fragment):
    with pytest.raises(PresetError, match=re.escape(fragment)):
        load_preset("lbm2d-cavity", overrides, backend="numpy")


@pytest.mark.parametrize("overrides,fragment", [
    (["initial.center=[0.0, 1.5]"], "initial.center = [0.0, 1.5] lies outside the domain"),
    (["initial.kind='acoustic-pulse'", "initial.center=[-3.0, 0.0]"], "initial.center = [-3.0, 0.0]"),
])
def test_nonsense_compact_ns_overrides_are_refused(overrides, fragment):
    with pytest.raises(PresetError, match=re.escape(fragment)):
        load_preset("compact-vortex-outflow", overrides, backend="numpy")


@pytest.mark.parametrize("name,overrides,fragment", [
    ("compact-rotating-square", ["initial.box=[0.1, -0.1, 0.4, 0.6]"], "its corners are in the wrong order"),
    ("compact-rotating-square", ["initial.box=[-0.1, 0.1, 0.6, 0.4]"], "its corners are in the wrong order"),
    ("compact-rotating-square", ["initial.box=[2.0, 3.0, 0.4, 0.6]"], "[2, 3] along x covers no grid point"),
    ("compact-square1d", ["initial.lo=1.5", "initial.hi=1.7"], "initial.lo/hi: [1.5, 1.7] along x covers no grid"),
    ("compact-derivative", ["initial.mode=64"], "initial.mode = 64 is not a wave this grid resolves: 128 points "
                                                "along x hold 1 … 63 periods"),
    ("compact-derivative", ["initial.mode=0"], "mode 0 is a zero field"),
    ("compact-advection1d", ["initial.kind='sine'", "initial.mode=128"], "256 points along x hold 1 … 127"),
])
def test_nonsense_compact_initial_states_are_refused(name, overrides, fragment):
    with pytest.raises(PresetError, match=re.escape(fragment)):
        load_preset(name, overrides, backend="numpy")


@pytest.mark.parametrize("name,overrides,fragment", [
    ("sph-piston2d", ["geometry.piston_amplitude=5.0"], "geometry.piston_amplitude = 5 reaches the far wall"),
    ("sph-piston2d", ["geometry.piston_amplitude=3.0"], "of the 3 m tank"),
    ("sph-dambreak2d", ["physics.gravity=0"], "physics.gravity = 0 gives the sound speed"),
    ("sph-hydrostatic", ["physics.gravity=0.0"], "physics.gravity = 0 gives the sound speed"),
])
def test_nonsense_sph_overrides_are_refused(name, overrides, fragment):
    with pytest.raises(PresetError, match=re.escape(fragment)):
        load_preset(name, overrides, backend="numpy")


def test_sph_settings_at_the_edge_still_load():
    assert load_preset("sph-piston2d", ["geometry.piston_amplitude=2.9"], backend="numpy")
    assert load_preset("sph-dambreak2d", ["physics.gravity=1e-3"], backend="numpy")


def test_compact_initial_states_at_the_edge_still_load():
    assert load_preset("compact-derivative", ["initial.mode=63"], backend="numpy").initial.mode == 63
    assert load_preset("compact-vortex-outflow", ["initial.center=[1.0, -1.0]"], backend="numpy")
    assert load_preset("compact-rotating-square", ["initial.box=[-0.1, 0.1, 0.4, 0.6]"], backend="numpy")


def test_grid_n_alone_still_sets_a_square():
    p = load_preset("lbm2d-cavity", ["grid.n=40"], backend="numpy")
    assert (p.grid.nx, p.grid.ny) == (40, 40)


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_a_checkpoints_stored_preset_validates_again(name, backend):
    """`nagare run - --resume FILE` re-validates the preset stored in the checkpoint (a full dump:
    grid.n with nx/ny, tau or reynolds, every default): it must give the same simulation."""
    p = load_preset(name, backend=backend)
    stored = {k: v for k, v in raw_dict(p).items() if k != "cpu_overrides"}
    q = validate(stored, "c.npz (preset)")
    strip = {"cpu_overrides", "description", "extends"}
    assert {k: v for k, v in raw_dict(q).items() if k not in strip} == \
        {k: v for k, v in raw_dict(p).items() if k not in strip}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("as_extends", [False, True])
def test_a_fifo_is_refused_not_read(tmp_path, as_extends):
    """Reading a FIFO blocks until a writer comes: a preset must be a regular file."""
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    target = fifo
    if as_extends:
        target = tmp_path / "child.toml"
        target.write_text('extends = "pipe.toml"\nengine = "diffusion3d"\ndescription = "x"\n')
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", str(target), "--backend", "numpy",
                           "--steps", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "not a regular file" in err[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_folder_named_like_a_preset_does_not_hide_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "diffusion3d").mkdir()  # e.g. an output folder named after the preset
    assert load_preset("diffusion3d", backend="numpy").engine == "diffusion3d"
    with pytest.raises(PresetError, match="is a folder, not a regular file"):
        resolve_path(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_obstacle_image_is_refused(tmp_path):
    fifo = tmp_path / "mask.png"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "lbm2d-cylinder", "--backend", "numpy",
                           "--set", "obstacle.kind='image'", "--set", f"obstacle.path='{fifo}'", "--steps", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()[-1]
    assert "obstacle.path" in err and "not a regular file" in err, proc.stderr


def test_set_on_cpu_overrides_is_used_and_validated(capsys):
    assert load_preset("diffusion3d", ["cpu_overrides.grid.nx=20"], backend="numpy").grid.nx == 20
    assert main(["run", "diffusion3d", "--set", "cpu_overrides.grid=[1]", "--steps", "1", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cpu_overrides.grid" in err, err


def test_an_extending_file_replaces_the_other_side_of_an_exclusive_pair(tmp_path):
    """lbm2d-cavity gives grid.n (and [cpu_overrides] grid.n) and physics.reynolds: a file that
    extends it with grid.nx/ny and physics.tau means those, not a conflict."""
    child = tmp_path / "rect.toml"
    child.write_text('extends = "lbm2d-cavity"\ndescription = "rect"\n[grid]\nnx = 60\nny = 40\n'
                     '[physics]\ntau = 0.7\n')
    for backend in ("numpy", "cupy"):
        p = load_preset(child, backend=backend)
        assert (p.grid.nx, p.grid.ny, p.grid.n) == (60, 40, None)
        assert p.physics.tau == 0.7 and p.physics.reynolds is None
    # --set replaces a whole side as an extending file does; both sides on the command line stay an error
    p = load_preset(child, ["grid.n=50"], backend="numpy")
    assert (p.grid.nx, p.grid.ny, p.grid.n) == (50, 50, 50)
    with pytest.raises(PresetError, match="both given"):
        load_preset(child, ["grid.n=50", "grid.nx=20"], backend="numpy")


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_a_set_that_gives_a_whole_side_of_an_exclusive_pair_replaces_the_presets_other_side(backend):
    """lbm2d-cavity gives grid.n (and, on CPU, a smaller one in [cpu_overrides]) and physics.reynolds:
    --set grid.nx + grid.ny make a rectangle, --set physics.tau replaces Re; one side's key alone
    (grid.nx only) is refused with what to give, never half a grid from the file."""
    p = load_preset("lbm2d-cavity", ["grid.nx=64", "grid.ny=48", "physics.tau=0.6"], backend)
    assert (p.grid.nx, p.grid.ny, p.grid.n) == (64, 48, None)
    assert (p.physics.tau, p.physics.reynolds) == (0.6, None)
    with pytest.raises(PresetError, match="grid.n sets a square grid: change grid.n, or give both grid.nx and grid.ny"):
        load_preset("lbm2d-cavity", ["grid.nx=64"], backend)

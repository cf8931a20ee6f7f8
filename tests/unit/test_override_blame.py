"""A refused preset names its cause: the ``--set KEY=VALUE`` (or the ``--gpus N``) without which it
passes the check that failed, as the user typed it, and the preset it was applied to; the file
itself only when the file is what is broken."""
from __future__ import annotations

import pytest
from nagare.app.cli import main
from nagare.engine.errors import PresetError
from nagare.engine.presets import load_preset, resolve_path

RUN = ["run", "lbm2d-cylinder", "--backend", "numpy", "--steps", "1", "--quiet"]


def refusal(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("override,check", [
    ("grid.nx=-4", "grid.nx: got -4; expected greater than or equal to 4"),
    ("grid.nx=abc", "grid.nx: got 'abc'; expected a valid integer"),
    ("run.steps_per_frame=0", "run.steps_per_frame: got 0; expected greater than or equal to 1"),
    ("grid.bogus=3", "grid.bogus: got 3; unknown key; allowed keys here: nx, ny, n"),
    ("bogus.x=1", "bogus: got {'x': 1}; unknown key; allowed keys here: engine,"),
    ("physics.force=[0.001, 0.0]", "a body force with an inlet/outlet channel is not supported"),
    ("variants.kernel=bogus", "variants.kernel: got 'bogus'; allowed: reference,"),
    ("variants.bogus=1", "variants.bogus: got 1; unknown variant axis"),
    ("engine=foo", "engine: got 'foo'; unknown engine family"),
])
def test_a_refused_set_is_named_with_the_check_it_failed(capsys, override, check):
    err = refusal(capsys, *RUN, "--set", override, "--set", "run.steps=3")
    assert err.startswith(f"nagare: --set {override} (on "), err  # not the file, not the innocent run.steps
    assert f"lbm2d-cylinder.toml): {check}" in err, err
    assert "run.steps=3" not in err and "[cpu_overrides]" not in err and "cpu_overrides." not in err, err


def test_a_check_across_keys_names_the_set_and_where_its_other_values_come_from(capsys):
    """NumPy runs the preset's [cpu_overrides] size (240 × 96): a grid.ny the cylinder does not fit there
    is named with the values the check quotes (240 is not in the file's [grid])."""
    err = refusal(capsys, *RUN, "--set", "grid.ny=16", "--set", "run.steps=3")
    assert err.startswith("nagare: --set grid.ny=16 (on "), err
    assert ("lbm2d-cylinder.toml with its [cpu_overrides], as a NumPy run takes it): obstacle.diameter = 16 does "
            "not fit the 240×16 grid; allowed: at least 1 node and less than 16") in err, err
    with pytest.raises(PresetError) as exc:  # the GPU run takes the file's own size
        load_preset("lbm2d-cylinder", ["grid.ny=16", "run.steps=3"], backend="cupy")
    msg = str(exc.value)
    assert msg.startswith("--set grid.ny=16 (on ") and "cpu_overrides" not in msg, msg
    assert "lbm2d-cylinder.toml): obstacle.diameter = 40 does not fit the 1024×16 grid" in msg, msg


def test_overrides_that_each_break_a_check_are_named_together(capsys):
    err = refusal(capsys, *RUN, "--set", "grid.ny=10", "--set", "grid.nx=10", "--set", "run.steps=3")
    assert err.startswith("nagare: --set grid.ny=10 and --set grid.nx=10 (on "), err
    assert "obstacle.diameter = 16 does not fit the 10×10 grid" in err, err


def test_an_override_that_only_moves_a_value_is_not_blamed(capsys):
    """--set obstacle.diameter=12 with grid.ny=10: without the diameter the check still fails (16 nodes
    do not fit either); without grid.ny it passes. Only grid.ny is the cause."""
    err = refusal(capsys, *RUN, "--set", "grid.ny=10", "--set", "obstacle.diameter=12")
    assert err.startswith("nagare: --set grid.ny=10 (on "), err
    assert "obstacle.diameter = 12 does not fit the 240×10 grid" in err, err


def _cylinder_with(tmp_path, old: str, new: str):
    text = resolve_path("lbm2d-cylinder").read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new, 1))
    return bad


def test_a_broken_check_in_the_file_names_the_file_though_a_set_changes_its_numbers(tmp_path):
    """The file's cylinder (400 nodes) does not fit its own grid: a --set grid.nx changes the numbers
    the check quotes but is not its cause."""
    bad = _cylinder_with(tmp_path, "diameter = 40.0", "diameter = 400.0")
    with pytest.raises(PresetError) as exc:
        load_preset(bad, ["grid.nx=2000", "run.steps=3"], backend="cupy")
    msg = str(exc.value)
    assert msg.startswith(f"{bad}: obstacle.diameter = 400 does not fit the 2000×384 grid"), msg
    assert "--set" not in msg, msg


def test_a_broken_cpu_override_in_the_file_names_the_file(tmp_path):
    bad = _cylinder_with(tmp_path, "diameter = 16.0", "diameter = 200.0")
    with pytest.raises(PresetError) as exc:
        load_preset(bad, ["grid.nx=300"], backend="numpy")
    msg = str(exc.value)
    assert msg.startswith(f"{bad}: cpu_overrides; obstacle.diameter = 200 does not fit the 300×96 grid"), msg
    assert "--set" not in msg, msg


def test_the_first_refusal_is_named_by_its_own_cause(tmp_path):
    """A file broken at one key and a --set at another: whichever the loader meets first is said of
    what broke it ([run] comes before [grid] in the model, [tracers] after it)."""
    bad = _cylinder_with(tmp_path, "steps_per_frame = 20", "steps_per_frame = 0")
    with pytest.raises(PresetError) as exc:
        load_preset(bad, ["grid.nx=-4"], backend="cupy")
    assert str(exc.value).startswith(f"{bad}: run.steps_per_frame: got 0"), str(exc.value)
    bad = _cylinder_with(tmp_path, "rate = 2000", "rate = 0")
    with pytest.raises(PresetError) as exc:
        load_preset(bad, ["grid.nx=-4"], backend="cupy")
    assert str(exc.value).startswith(f"--set grid.nx=-4 (on {bad}): grid.nx: got -4"), str(exc.value)


def test_a_set_below_a_value_names_the_set(capsys):
    err = refusal(capsys, *RUN, "--set", "grid.nx.y=3")
    assert err == "nagare: --set grid.nx.y=3: grid.nx.y: got 3; 'nx' is a value, not a section", err


def test_a_build_check_of_a_set_value_names_the_set(capsys):
    """amr3d refuses a body too small for its level when it builds the tree (after the loader): the
    refusal names the --set that gave the diameter."""
    err = refusal(capsys, "run", "amr3d-sphere-re20", "--backend", "numpy", "--steps", "1", "--quiet",
                  "--set", "body[0].diameter=0.1")
    assert err.startswith("nagare: --set body[0].diameter=0.1 (on "), err
    assert "amr3d-sphere-re20.toml): body[0].diameter: got 0.1;" in err, err


def test_an_indexed_key_is_named_as_typed(capsys):
    err = refusal(capsys, "run", "amr3d-sphere-re20", "--backend", "numpy", "--steps", "1", "--quiet",
                  "--set", "body[0].level=-1")
    assert err.startswith("nagare: --set body[0].level=-1 (on "), err
    assert "amr3d-sphere-re20.toml): body[0].level: got -1; expected greater than or equal to 0" in err, err


# ---- --gpus N is decomp.parts = N: a refusal names the option typed, and why ---------------------------
GPUS = ["run", "--backend", "numpy", "--steps", "1", "--quiet"]


@pytest.mark.parametrize("argv,start,why", [
    (["diffusion3d", "--gpus", "100"], "--gpus 100 (on ",
     "diffusion3d.toml): got 100; expected less than or equal to 64 sub-domains"),
    (["diffusion3d", "--set", "grid.nz=8", "--gpus", "9"], "--set grid.nz=8 and --gpus 9 (on ",
     "diffusion3d.toml): grid.nz = 8 z planes cannot be split into 9 sub-domains of at least 1 z plane each"),
    (["lbm2d-cylinder", "--gpus", "97"], "--gpus 97 (on ",
     "lbm2d-cylinder.toml): got 97; expected less than or equal to 64 sub-domains"),
    (["lbm2d-cylinder", "--gpus", "60", "--set", "grid.ny=50"], "--set grid.ny=50 and --gpus 60 (on ",
     "lbm2d-cylinder.toml): grid.ny = 50 y rows cannot be split into 60 sub-domains"),
    (["diffusion3d", "--gpus", "2", "--set", "decomp.transport=nccl"], "--gpus 2 (on ",
     "diffusion3d.toml): NCCL transport for 2 parts: NCCL needs the CuPy backend (--set decomp.transport=nccl "
     "asks for it; 'auto' runs the sub-domains on one device when fewer GPUs are there)"),
    (["compact-advection1d", "--gpus", "2"], "--gpus: got 2; ",
     "the compact family is not decomposed (--gpus works for diffusion3d, lbm2d, wave2d)"),
    (["diffusion3d", "--gpus", "0"], "--gpus: got 0; ", "expected a positive number of sub-domains"),
])
def test_a_refused_gpus_names_the_option_as_typed(capsys, argv, start, why):
    err = refusal(capsys, *GPUS[:1], argv[0], *GPUS[1:], *argv[1:])
    assert err.startswith(f"nagare: {start}"), err
    assert why in err, err
    assert "decomp.parts" not in err, err  # an option nobody typed

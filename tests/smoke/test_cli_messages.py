"""What `nagare run` says: the simulated time in its progress and summary lines, and refusals that
name what caused them (the user's --set, not the preset; advice a family's knobs can follow)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from nagare.app.cli import main


def _final_progress(err: str) -> str:
    return [line for line in err.splitlines() if line.startswith("[")][-1]


@pytest.mark.parametrize("preset,sets,units", [
    ("lbm2d-cavity", ["grid.n=24"], "lattice steps"),
    ("sph-dambreak2d", ["particles.dp=0.05"], "s"),
    ("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32"], "l/c∞"),
])
def test_progress_and_summary_give_the_simulated_time(tmp_path, capsys, preset, sets, units):
    """The time the dump holds, in the engine's units, as the window's status line writes it."""
    dump = tmp_path / "d.npz"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["run", preset, "--steps", "6", "--batch", "3", "--backend", "numpy", "--dump", str(dump), *args]) == 0
    err = capsys.readouterr().err
    t = float(np.load(dump)["time"])
    assert t > 0
    line = _final_progress(err)
    m = re.search(rf"6/6 steps  t = (\S+) {re.escape(units)}  ", line)
    assert m, line
    np.testing.assert_allclose(float(m.group(1)), t, rtol=1e-5)
    summary = [x for x in err.splitlines() if x.startswith("nagare: wrote ")]
    assert len(summary) == 1 and summary[0].endswith(f"(the run ended at step 6, t = {t:.6g} {units})"), summary


def test_a_set_is_not_called_the_presets_cpu_override(capsys):
    """--set physics.reynolds=300 on lbm2d-cavity, whose [cpu_overrides] set reynolds = 400: the note on
    the preset's overrides keeps the grid it gives and leaves out the user's value."""
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy", "--set", "physics.reynolds=300"]) == 0
    note = [x for x in capsys.readouterr().err.splitlines() if "[cpu_overrides]" in x]
    assert note == ["nagare: the preset's [cpu_overrides] apply (96² on CPU)"], note
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy"]) == 0
    note = [x for x in capsys.readouterr().err.splitlines() if "[cpu_overrides]" in x]
    assert note == ["nagare: the preset's [cpu_overrides] apply (96² on CPU; physics.reynolds = 400.0)"], note
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy",
                 "--set", "cpu_overrides.physics.reynolds=300"]) == 0
    note = [x for x in capsys.readouterr().err.splitlines() if "[cpu_overrides]" in x]
    assert note == ["nagare: the preset's [cpu_overrides] apply (96² on CPU)"], note
    # the user's whole table replaces the preset's: nothing of it is the preset's
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy", "--set", "grid.n=32",
                 "--set", "physics.reynolds=100"]) == 0
    assert "[cpu_overrides]" not in capsys.readouterr().err


def test_a_memory_refusal_names_the_set_that_caused_it(capsys, monkeypatch):
    """The engine's estimate is over the free memory because of --set grid.n=4000: that key is named
    (not the preset file alone, nor the other --set); a preset too large by itself names the file."""
    from nagare.engine import contract

    monkeypatch.setattr(contract, "available_memory", lambda backend: 256 << 20)  # 256 MiB free
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy", "--set", "physics.reynolds=300",
                 "--set", "grid.n=4000", "--set", "physics.lid_velocity=0.05"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"nagare: --set grid\.n=4000 \(on \S*lbm2d-cavity\.toml\): this preset needs about [\d.]+ GiB "
                        r"of host memory, 0\.2 GiB are free; reduce the problem size", err[0]), err
    monkeypatch.setattr(contract, "available_memory", lambda backend: 1 << 10)  # nothing fits
    assert main(["run", "lbm2d-cavity", "--steps", "1", "--backend", "numpy", "--set", "physics.reynolds=300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"nagare: \S*lbm2d-cavity\.toml: this preset needs about", err[0]), err


def test_lbm2d_divergence_gives_lattice_boltzmann_advice(capsys):
    """No "time step" (LBM has none to lower); the bound as a plain inequality; τ and the knobs."""
    assert main(["run", "lbm2d-cavity", "--steps", "600", "--backend", "numpy", "--quiet",
                 "--set", "physics.reynolds=20000"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nagare: lbm2d diverged at step "), err
    assert "time step" not in err[0] and "(-1," not in err[0]
    assert re.search(r"is outside its physical range \((max_speed < 0\.577|min_density > 0|max_density < \d+)\); "
                     r"τ = 0\.50\d+: lower physics\.reynolds or raise the resolution", err[0]), err


def test_bounds_read_as_plain_inequalities():
    from nagare.engine.contract import bound_text

    assert bound_text("max_speed", -math.inf, 1 / math.sqrt(3)) == "max_speed < 0.577"
    assert bound_text("min_density", 0.0, math.inf) == "min_density > 0"
    assert bound_text("max", -2.0, 2.0) == "-2 < max < 2"


def test_presets_on_a_cpu_say_what_their_cpu_overrides_change(capsys):
    """`nagare presets` on NumPy: a preset whose [cpu_overrides] change what runs says so, as the
    window's list does; on a GPU backend the line is the description alone."""
    assert main(["presets", "--backend", "numpy"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "(64³ on CPU)" in lines["diffusion3d"] or "on CPU" in lines["diffusion3d"], lines["diffusion3d"]
    assert "on CPU" not in lines["compact-advection1d"]  # no [cpu_overrides]


def test_a_reader_that_goes_away_gets_no_traceback():
    """`nagare presets | head -1`: the list meets a closed pipe; the command stops quietly (exit 141,
    as a shell reports SIGPIPE), with no traceback. The child's stdout is a pipe whose reader is
    already gone, unbuffered (-u), so the first line written fails inside the command."""
    import subprocess
    import sys

    child = ("import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1); "
             "from nagare.app.cli import main; sys.exit(main(['presets', '--backend', 'numpy']))")
    p = subprocess.run([sys.executable, "-u", "-c", child], capture_output=True, text=True, timeout=120)
    assert p.returncode == 141, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr

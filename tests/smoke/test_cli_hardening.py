"""CLI hardening (issue 19) beyond tests/smoke/test_cli.py: a checkpoint must be physical, not only
finite, to be resumed."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from nagare.engine.backend import get_backend
from nagare.engine.checkpoint import save_checkpoint
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

BLOW_UP = ["grid.n=128", "physics.reynolds=100000.0", "physics.lid_velocity=0.3"]


def test_an_unphysical_checkpoint_is_refused_in_one_line(tmp_path):
    """The issue's lbm2d-cavity at Re 10⁵, stepped past its bounds without the run's checks (as a
    checkpoint from before the sanity bounds): finite, but |u| above Mach 1 — refused on resume."""
    e = create_engine(load_preset("lbm2d-cavity", BLOW_UP, backend="numpy"), get_backend("numpy"))
    e.step(56)
    ckpt = e.checkpoint()
    assert all(np.isfinite(a).all() for a in ckpt["arrays"].values())  # finite: only the bounds catch it
    path = tmp_path / "bad.npz"
    save_checkpoint(ckpt, path)
    r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "-", "--resume", str(path), "--steps", "5",
                        "--backend", "numpy", "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "bad.npz: the state at step 56 is not physical (max_speed" in lines[0], r.stderr
    assert "not a state to resume from" in lines[0] and "Warning" not in r.stderr


def test_a_physical_checkpoint_still_resumes(tmp_path):
    e = create_engine(load_preset("lbm2d-cavity", BLOW_UP, backend="numpy"), get_backend("numpy"))
    e.step(30)
    path = tmp_path / "good.npz"
    save_checkpoint(e.checkpoint(), path)
    r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "-", "--resume", str(path), "--steps", "5",
                        "--backend", "numpy", "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

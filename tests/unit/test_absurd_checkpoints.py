"""A checkpoint whose state is finite but absurd (issue 40: every population 1e30, ρ = 9e30) is refused
on load by the family's sanity bounds, every family: the bounds have an upper side where the state
can be absurdly large (density, amplitude), and a family's scale is its preset's, not the loaded
state's."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.errors import CheckpointError
from nagare.engine.families import FAMILIES, engine_class


def first_engine(family):
    cls = engine_class(family)
    label, preset = next(iter(cls.equivalence_presets().items()))
    return cls(preset, get_backend("numpy"))


def _absurd(arrays: dict, how: str) -> dict:
    """Every floating-point state array (not the tracers', which are no flow) set to 1e30, or
    multiplied by 1e6: finite, so only the bounds can tell."""
    out = {}
    for k, v in arrays.items():
        v = np.asarray(v)
        if np.issubdtype(v.dtype, np.floating) and not k.startswith("tracers"):
            v = np.full_like(v, 1e30) if how == "1e30" else v * v.dtype.type(1e6)
        out[k] = v
    return out


@pytest.mark.parametrize("how", ["1e30", "x1e6"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_absurd_finite_checkpoint_is_refused_by_the_sanity_bounds(family, how):
    a = first_engine(family)
    a.step(1)
    ckpt = a.checkpoint()
    ckpt = {**ckpt, "arrays": _absurd(ckpt["arrays"], how)}
    assert all(np.isfinite(np.asarray(v, np.float64)).all() for v in ckpt["arrays"].values())
    b = first_engine(family)
    b.restore(ckpt)
    with pytest.raises(CheckpointError, match="is not physical") as exc:
        b.check_physical()
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_sane_checkpoint_passes_the_load_check(family):
    a = first_engine(family)
    a.step(2)
    b = first_engine(family)
    b.restore(a.checkpoint())
    b.check_physical()


def _reloaded(engine_of, change):
    """A fresh engine of ``engine_of()`` restored from another's checkpoint after 1 step with
    ``change(arrays, engine)`` applied to its arrays."""
    a = engine_of()
    a.step(1)
    ckpt = a.checkpoint()
    arrays = {k: np.array(v, copy=True) for k, v in ckpt["arrays"].items()}
    change(arrays, a)
    b = engine_of()
    b.restore({**ckpt, "arrays": arrays})
    return b


def test_navier_stokes_at_a_huge_density_with_the_free_streams_pressure_and_speed_is_refused():
    """The one absurd state the NS bounds (Mach, pressure, its disturbance) all pass: ρ = 9e30 with
    the free stream's u, v and p; the density bound refuses it."""
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    def engine():
        p = load_preset("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32", "physics.dt=0.02"], backend="numpy")
        return create_engine(p, get_backend("numpy"))

    def dense(arrays, eng):
        g = eng.ns.gas
        shape = arrays["U"].shape[1:]
        full = [np.full(shape, x) for x in (9e30, g.u_inf, g.v_inf, g.p_inf)]
        arrays["U"] = ns.conservative(np, *full, g.gamma, np.empty_like(arrays["U"]))

    b = _reloaded(engine, dense)
    with pytest.raises(CheckpointError, match="max_density"):
        b.check_physical()


def test_sph_densities_a_hundred_times_rho0_are_refused():
    def dense(arrays, eng):
        arrays["rho"] = arrays["rho"] * 100.0

    b = _reloaded(lambda: first_engine("sph"), dense)
    with pytest.raises(CheckpointError, match="rho_max"):
        b.check_physical()


@pytest.mark.parametrize("family, name", [("diffusion3d", "f"), ("wave2d", "u")])
def test_the_scale_is_the_presets_not_the_loaded_states(family, name):
    """Bounds scaled by the initial state (the maximum principle, the conserved energy) take the
    preset's initial state as that scale: a loaded state a thousand times larger is refused, not
    taken as the new scale."""
    def louder(arrays, eng):
        for k in arrays:
            if k.startswith(name):
                arrays[k] = arrays[k] * 1000.0

    b = _reloaded(lambda: first_engine(family), louder)
    with pytest.raises(CheckpointError, match="is not physical"):
        b.check_physical()


def test_the_cli_refuses_the_issues_checkpoint_in_one_line(tmp_path):
    """The issue's case through `nagare run - --resume`: lbm2d-cavity with every population 1e30
    (ρ = 9e30, u = 0) is refused, exit 2, one line naming the file and the bound."""
    import subprocess
    import sys

    from nagare.engine.checkpoint import save_checkpoint
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("lbm2d-cavity", ["grid.n=32"], backend="numpy"), get_backend("numpy"))
    e.step(3)
    ckpt = e.checkpoint()
    ckpt["arrays"] = _absurd(ckpt["arrays"], "1e30")
    path = tmp_path / "absurd.npz"
    save_checkpoint(ckpt, path)
    r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "-", "--resume", str(path), "--steps", "2",
                        "--backend", "numpy", "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "absurd.npz: the state at step 3 is not physical (max_density = 9e+30" in lines[0], \
        r.stderr

"""The compact family's time-step limit (engine/compact/stability.py, audit D7): the loader refuses a
physics.dt above the RK4 limit computed from the preset, in one line naming the key, the value and
the limit; every shipped preset stays below it; and the limit is where the engine really goes
unstable (just below: bounded; just above: it grows), so it is neither a guess nor a loose bound."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.app.cli import main
from nagare.engine.backend import get_backend
from nagare.engine.compact import schemes, stability
from nagare.engine.errors import PresetError
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset, preset_names

COMPACT = [n for n in preset_names() if n.startswith("compact-")]
PERIODIC_NS = ["boundaries.west='periodic'", "boundaries.east='periodic'", "boundaries.south='periodic'",
               "boundaries.north='periodic'", "physics.filter=false"]


def test_rk4_numbers_match_their_closed_forms():
    kmax = schemes.max_modified_wavenumber(0.0)
    # RK4 reaches 2√2 on the imaginary axis and 2.7853 on the negative real axis
    np.testing.assert_allclose(stability.advective_number("compact6"), 2 * math.sqrt(2) / kmax, rtol=1e-9,
                               err_msg="compact6 advective number vs 2√2/max k'")
    np.testing.assert_allclose(stability.viscous_number() * kmax ** 2, 2.785293563405, rtol=1e-9,
                               err_msg="viscous number × max k'² vs RK4's real-axis reach")
    assert 1.3 < stability.advective_number("dissipative5") < 1.5, "dissipative5 advective number"


@pytest.mark.parametrize("name", COMPACT)
@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_every_shipped_compact_preset_is_below_its_limit(name, backend):
    p = load_preset(name, backend=backend)
    lim = stability.limits(p)
    if p.physics.problem == "derivative":
        assert lim is None, f"{name}: the derivative benchmark has no time integration"
        return
    assert p.physics.dt <= stability.SAFETY * lim["dt"], f"{name} ({backend}): dt {p.physics.dt} vs {lim}"


@pytest.mark.parametrize("name,over,fragment", [
    ("compact-advection1d", ["physics.dt=0.006"], "physics.dt = 0.006 exceeds the RK4 stability limit 0.00555"),
    ("compact-advection1d", ["physics.speed=1e6"], "|c| = 1e+06"),
    ("compact-rotating-cone", ["grid.nx=32", "grid.ny=32", "physics.dt=0.01"], "limit 0.0073"),
    ("compact-rotating-cone", ["physics.omega=1e6"], "max|u| = 1e+06"),
    # (the NumPy run is checked on its own 128² grid, [cpu_overrides]: the limit's value is that grid's)
    ("compact-vortex-outflow", ["physics.reynolds=1e-6"], "h = 0.01575 × 0.01575; advective 0.00889, viscous 4.49e-11"),
    ("compact-vortex-outflow", ["initial.kind='acoustic-pulse'", "initial.amplitude=1e6"], "max|u| = 1e+06"),
])
def test_a_set_that_makes_dt_too_large_is_refused_in_one_line(name, over, fragment, capsys):
    with pytest.raises(PresetError, match="physics.dt = .* exceeds the RK4 stability limit"):
        load_preset(name, over, backend="cupy")
    sets = [a for o in over for a in ("--set", o)]
    assert main(["run", name, *sets, "--steps", "1", "--backend", "numpy", "--quiet"]) == 2, f"{name} {over}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and fragment in err[0], err


def test_a_dt_just_below_the_limit_loads():
    assert load_preset("compact-advection1d", ["physics.dt=0.0055"], backend="cupy").physics.dt == 0.0055


def _engine_at(name, over, factor, seed=1):
    """The preset's engine with physics.dt = factor × its limit (the validation bypassed) on a
    random state (every mode present)."""
    p = load_preset(name, [*over, "physics.dt=1e-9"], backend="numpy")
    lim = stability.limits(p)["dt"]
    p = p.model_copy(update={"physics": p.physics.model_copy(update={"dt": factor * lim})})
    e = create_engine(p, get_backend("numpy"))
    e.random_state(np.random.default_rng(seed))
    return e


def _growth(e, steps):
    """‖state − its mean‖₂ after ``steps`` over before (inf when it overflowed)."""
    def spread():
        a = [np.asarray(v, np.float64) for v in e.state_arrays().values()]
        return math.sqrt(sum(float(np.sum((x - x.mean(axis=(-2, -1), keepdims=True)) ** 2)) for x in a))

    s0 = spread()
    with np.errstate(all="ignore"):
        e.step(steps)
        s1 = spread()
    return s1 / s0 if math.isfinite(s1) else math.inf


@pytest.mark.parametrize("name,over,steps,bounded", [
    # linear advection: the ℓ2 norm cannot grow inside the RK4 region
    ("compact-advection1d", ["grid.nx=32"], 400, 1.0 + 1e-9),
    ("compact-advection1d", ["grid.nx=32", "physics.scheme='dissipative5'"], 400, 1.0 + 1e-9),
    # Euler: the random disturbance trades energy nonlinearly (about +12 % here), but stays bounded
    ("compact-vortex-outflow", ["grid.nx=24", "grid.ny=24", "physics.viscous=false", *PERIODIC_NS], 150, 1.5),
])
def test_the_advective_limit_is_where_rk4_goes_unstable(name, over, steps, bounded):
    below = _growth(_engine_at(name, over, 0.95), steps)
    above = _growth(_engine_at(name, over, 1.1), steps)
    assert below <= bounded, f"{name} {over}: at 0.95 × the limit the state grew × {below:.4g}"
    assert above > 100, f"{name} {over}: at 1.1 × the limit the state grew only × {above:.4g}"


def test_the_viscous_limit_is_where_rk4_goes_unstable():
    over = ["grid.nx=24", "grid.ny=24", "physics.reynolds=1.0", *PERIODIC_NS]  # viscous-dominated
    e = _engine_at("compact-vortex-outflow", over, 0.9)
    lim = stability.limits(e.preset)
    assert lim["viscous"] < 0.05 * lim["advective"], lim
    below = _growth(e, 150)
    above = _growth(_engine_at("compact-vortex-outflow", over, 1.2), 150)
    assert below <= 1.0 + 1e-9, f"at 0.9 × the viscous limit the state grew × {below:.4g}"
    assert above > 100, f"at 1.2 × the viscous limit the state grew only × {above:.4g}"

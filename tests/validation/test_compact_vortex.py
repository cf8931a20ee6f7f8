"""P4's test 4: the compressible Navier–Stokes vortex (Ma = 1.1, Re = 10⁴, Γ/(c∞l) = -0.0005,
r_c/l = 0.15) carried out of [-l, l]² through the characteristic outflow (preset
compact-vortex-outflow).

- the acoustic waves left behind (|p - p∞| farther than 4 r_c from the carried vortex centre) stay
  below a stated fraction of the vortex's own pressure dip ρ∞Γ²/(2r_c²);
- the history of the maximum |ω| in [-l, l]² agrees with P4's reference — the same spacing on the
  4l × 4l domain, whose boundaries the vortex never reaches in this time — and with a run on a 2× finer
  grid.

NumPy sizes: 65² (the reference 129² on [-2l, 2l]², the finer run 129²); the GPU test runs P4's size,
513² against 1025² on [-2l, 2l]², through the same code (odd counts: the grids share their points).
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

T_END = 1.8  # the vortex centre leaves at t ≈ 0.91, its last visible part (4 r_c) by t ≈ 1.45
OMEGA0 = 2 * 0.0005 / 0.15 ** 2  # max |ω| of the initial vortex, 2|Γ|/r_c²


# 65² on [-l, l]² and 129² on [-2l, 2l]² share their points (h = l/32, both hold the vortex centre x = 0):
# grids offset by h/2 would sample the peak of ω differently and differ by 1.4 % from the start.
H0 = 2.0 / 64
DT0 = 0.4 * H0


def _history(n: int, half: float, dt: float = DT0, every: int = 5, backend: str = "numpy"):
    """(t, max |ω| over [-l, l]², reflected pressure / dip) every ``every`` steps up to T_END."""
    over = [f"grid.nx={n}", f"grid.ny={n}", f"grid.x0={-half}", f"grid.x1={half}", f"grid.y0={-half}",
            f"grid.y1={half}", f"physics.dt={dt}"]
    be = get_backend(backend)
    e = create_engine(load_preset("compact-vortex-outflow", over, backend=backend), be)
    inside = (np.abs(e._x_host) <= 1 + 1e-9) & (np.abs(e._y_host) <= 1 + 1e-9)
    inside = np.broadcast_to(inside, (n, n))
    out = []
    for _ in range(int(round(T_END / (dt * every)))):
        e.step(every)
        w = np.abs(be.asnumpy(e.ns.vorticity(e.U)))
        out.append((e.time, float(w[inside].max()), float(e.reflected_pressure())))
    return np.array(out)


@pytest.fixture(scope="module")
def run65():
    return _history(65, 1.0)


def test_vortex_leaves_with_small_reflected_pressure(run65):
    """Measured (65²): the largest wave anywhere away from the vortex, at any time, is 0.48 % of the dip
    (t ≈ 1.44, while the vortex's tail crosses the outflow; 0.04 % on 129², the level the reference
    domain shows without any boundary contact); the bound is 1 %. The vortex is gone at the end
    (max |ω| = 4·10⁻⁷ ω₀ < 10⁻³ ω₀): nothing stays trapped at the boundary."""
    t, w, refl = run65.T
    assert refl.max() < 1e-2, refl.max()
    assert w[0] > 0.95 * OMEGA0
    assert w[-1] < 1e-3 * OMEGA0, w[-1]


@pytest.mark.slow
def test_max_vorticity_history_matches_the_larger_domain_reference(run65):
    """P4's reference: the same grid points on [-2l, 2l]² (129²), max |ω| taken over [-l, l]² only, so
    the difference is what the outflow boundary does to the vortex while it leaves. Measured (65² vs
    129²): largest difference 0.11 % of ω₀ (at t = 1.0, the centre on the boundary; bound 0.5 %)."""
    ref = _history(129, 2.0)
    np.testing.assert_array_equal(ref[:, 0], run65[:, 0])
    np.testing.assert_allclose(run65[:, 1], ref[:, 1], rtol=0, atol=0.005 * OMEGA0)


@pytest.mark.slow
def test_max_vorticity_history_matches_a_finer_grid(run65):
    """65² against 129² on the same domain (Δt halved): largest difference 0.65 % of ω₀ (bound 1.5 %) —
    the 65² grid has 4.8 points per core radius, and its max |ω| dips as the centre passes between points."""
    fine = _history(129, 1.0, dt=DT0 / 2, every=10)
    np.testing.assert_array_equal(fine[:, 0], run65[:, 0])
    np.testing.assert_allclose(run65[:, 1], fine[:, 1], rtol=0, atol=0.015 * OMEGA0)


@pytest.mark.gpu
@pytest.mark.slow
def test_p4_size_on_the_gpu_matches_the_1024_reference():
    """P4's sizes: 513² on [-l, l]² against 1025² on [-2l, 2l]² (the same points), CuPy, Δt = 0.4 h.
    Bounds as on the CPU (about two minutes on a GPU)."""
    dt = 0.4 * 2.0 / 512
    run = _history(513, 1.0, dt=dt, every=20, backend="cupy")
    ref = _history(1025, 2.0, dt=dt, every=20, backend="cupy")
    assert run[:, 2].max() < 1e-2
    np.testing.assert_allclose(run[:, 1], ref[:, 1], rtol=0, atol=0.005 * OMEGA0)

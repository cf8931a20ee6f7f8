"""Flow past a sphere on the octree (amr3d flows), against published data (docs/amr3d-flows.md):
C_d at Re = 20 and Re = 100 within 3 %, and at Re = 100 the length of the recirculation behind
the sphere (L/D ≈ 0.87–0.88). GPU runs of the committed presets (32 points per diameter at the
wall, domain 24 D × 16 D × 16 D): marked `gpu` and `slow`.

The run stops when C_d has settled: over the last 10 convective times D/U it stays within 0.1 %,
or after ``max_steps``. A third test runs the Re = 20 case at 16 points per diameter on the octree
and on the uniform lattice of its finest spacing (every leaf at the finest level) to the same
physical time: C_d within 1 % of each other, and the points and GPU time of each. The Re = 100 case
also runs with fp16 storage (the preset's naive-fused rung on half level buffers): the same bounds,
and C_d within 1 % of the fp32 run's when both run in one session.

Reference values:
- Re = 100: C_d = 1.09 (Clift, Grace & Weber 1978 Table 5.2 / correlation 1.087; Johnson & Patel
  1999: 1.08 numerically; Mittal 1999: 1.09), recirculation length L/D = 0.87–0.88 measured from
  the rear of the sphere (Johnson & Patel 1999: 0.88; Taneda 1956: ≈ 0.87).
- Re = 20: C_d = 2.71 (Clift, Grace & Weber 1978: 24/Re · (1 + 0.1315 Re^(0.82 − 0.05 log10 Re)) =
  2.716; Le Clair, Hamielec & Pruppacher 1970, numerical: 2.74).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from nagare.engine.amr3d import d3q27
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def run_to_steady(name: str, max_steps: int, sets=(), log=sys.stdout, variants=None):
    preset = load_preset(name, list(sets), backend="cupy")
    eng = AMR3D(preset, get_backend("cupy"), variants=variants)
    U = float(np.linalg.norm(preset.flow.velocity))
    D = preset.body[0].diameter
    chunk = max(2, int(round(D / U / eng.dt)) // 2 * 2)  # one convective time D/U, even (graphs)
    hist = []
    while eng.step_count < max_steps:
        eng.step(chunk)
        eng.diagnostics()
        hist.append(eng.force_coefficients()["cd"])
        print(f"{name}: step {eng.step_count} (t U/D = {len(hist)}) C_d = {hist[-1]:.5f}", file=log, flush=True)
        last = hist[-10:]
        if len(hist) >= 20 and max(last) - min(last) < 1e-3 * abs(hist[-1]):
            break
    return eng, hist


def axis_velocity(eng) -> tuple[np.ndarray, np.ndarray]:
    """x and u_x at every stored node on the sphere's axis (y, z of its centre), each node once,
    from the finest leaf that holds it."""
    forest, m = eng.forest, eng.m
    unit = float(1 << forest.max_level)
    c = np.asarray(eng.preset.body[0].center) * unit
    f = eng.backend.asnumpy(eng.state_arrays()["f"]).astype(np.float64)
    rho = f.sum(0)
    ux = np.einsum("q,q...->...", d3q27.C[:, 0].astype(np.float64), f) / rho
    xs, us = [], []
    for leaf in range(forest.n_leaves):
        h = int(forest.spacing[leaf])
        o = forest.origin[leaf]
        j, k = (c[1] - o[1]) / h, (c[2] - o[2]) / h
        if not (0 <= j <= m - 1 and 0 <= k <= m - 1 and j == int(j) and k == int(k)):
            continue
        xs.append((o[0] + np.arange(m) * h) / unit)
        us.append(ux[leaf, int(k), int(j), :])
        lv = forest.level[leaf]
        xs[-1] = np.stack([xs[-1], np.full(m, lv)])
    x = np.concatenate([a[0] for a in xs])
    lv = np.concatenate([a[1] for a in xs])
    u = np.concatenate(us)
    order = np.lexsort((-lv, x))  # per x, the finest copy first
    x, u = x[order], u[order]
    first = np.r_[True, np.diff(x) > 0]
    return x[first], u[first]


def recirculation_length(eng) -> float:
    """L/D: from the rear of the sphere to where u_x on the axis turns positive (linear between nodes)."""
    body = eng.preset.body[0]
    x, u = axis_velocity(eng)
    rear = body.center[0] + 0.5 * body.diameter
    behind = x > rear
    xb, ub = x[behind], u[behind]
    k = int(np.nonzero(ub > 0)[0][0])
    assert k > 0 and ub[k - 1] <= 0, "no reversed flow behind the sphere"
    xz = xb[k - 1] - ub[k - 1] * (xb[k] - xb[k - 1]) / (ub[k] - ub[k - 1])
    return (xz - rear) / body.diameter


def test_sphere_re20_drag():
    eng, hist = run_to_steady("amr3d-sphere-re20", max_steps=4000)
    cd = hist[-1]
    print(f"Re 20: C_d = {cd:.4f} after {eng.step_count} steps (reference 2.71)")
    np.testing.assert_allclose(cd, 2.71, rtol=0.03)


_RE100_CD: dict = {}  # storage → C_d of this process's runs (fp16 against fp32)


def _re100_cd(storage: str) -> tuple[float, float, int]:
    """C_d, L/D and steps of the Re 100 run with ``storage``; C_d kept for the fp16 comparison."""
    eng, hist = run_to_steady("amr3d-sphere-re100", max_steps=6000, variants={"storage": storage})
    _RE100_CD[storage] = hist[-1]
    return hist[-1], recirculation_length(eng), eng.step_count


@pytest.mark.parametrize("storage", ["native", "fp16"])
def test_sphere_re100_drag_and_recirculation(storage):
    cd, L, steps = _re100_cd(storage)
    print(f"Re 100 ({storage} storage): C_d = {cd:.4f}, L/D = {L:.3f} after {steps} steps "
          "(reference 1.09, 0.87–0.88)")
    np.testing.assert_allclose(cd, 1.09, rtol=0.03)
    assert 0.84 <= L <= 0.91
    if storage == "fp16":  # within 1 % of fp32 (issue 38), whichever process ran the native case
        native = _RE100_CD["native"] if "native" in _RE100_CD else _re100_cd("native")[0]
        np.testing.assert_allclose(cd, native, rtol=0.01)


def _timed_run(preset, until_convective: float, log=sys.stdout):
    eng = AMR3D(preset, get_backend("cupy"))
    U = float(np.linalg.norm(preset.flow.velocity))
    D = preset.body[0].diameter
    steps = int(round(until_convective * D / U / eng.dt)) // 2 * 2
    eng.step(2)  # compile and build outside the timed part
    eng.synchronize()
    t0 = time.perf_counter()
    eng.step(steps - 2)
    eng.synchronize()
    seconds = time.perf_counter() - t0
    cd = eng.force_coefficients()["cd"]
    points = eng.forest.n_leaves * eng.m ** 3
    print(f"{preset.description}: {eng.forest.n_leaves} leaves, {points:,} points, {steps} steps of dt = {eng.dt}, "
          f"{seconds:.1f} s, C_d = {cd:.4f}", file=log, flush=True)
    return cd, points, seconds


def test_amr_and_uniform_lattice_at_the_finest_spacing_agree():
    """Re = 20, 16 points per diameter: the octree (levels up to 3) against every leaf at level 3."""
    sets = ["body=[{kind='sphere', center=[16.0, 16.0, 16.0], diameter=2.0, level=3, band=0.5}]",
            "refine=[{lo=[0.27, 0.41, 0.41], hi=[0.55, 0.59, 0.59], level=3}]"]
    amr = load_preset("amr3d-sphere-re20", sets + ["description='octree'"], backend="cupy")
    uni = load_preset("amr3d-sphere-re20", sets[:1] + ["refine=[{lo=[0.0, 0.0, 0.0], hi=[1.0, 1.0, 1.0], level=3}]",
                                                        "description='uniform level 3'", "variants.kernels=naive"],
                      backend="cupy")
    cd_a, pts_a, t_a = _timed_run(amr, 20.0)
    cd_u, pts_u, t_u = _timed_run(uni, 20.0)
    print(f"octree vs uniform: C_d {cd_a:.4f} vs {cd_u:.4f} ({100 * (cd_a / cd_u - 1):+.2f} %), points "
          f"{pts_a / pts_u:.3f} of the uniform lattice's, GPU time {t_u / t_a:.1f}x shorter")
    np.testing.assert_allclose(cd_a, cd_u, rtol=0.01)

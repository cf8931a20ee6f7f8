"""lbm2d building blocks: velocity set, preset model, masks, collision invariants, tracers, variants."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine import registry
from nagare.engine.backend import get_backend
from nagare.engine.errors import PresetError, VariantUnavailable
from nagare.engine.lbm2d import Engine, Preset, d2q9, reference
from nagare.engine.lbm2d.tracers import Tracers
from nagare.engine.presets import validate
from PIL import Image


def preset(**raw):
    return Preset.model_validate({"engine": "lbm2d", "description": "unit", **raw})


def test_velocity_set_moments():
    W, C = d2q9.W, d2q9.C
    np.testing.assert_allclose((W[:, None, None] * C[:, :, None] * C[:, None, :]).sum(0), np.eye(2) / 3, atol=1e-15)
    np.testing.assert_array_equal(C[d2q9.OPP], -C)


def test_equilibrium_has_the_right_moments():
    rho, ux, uy = np.array([1.02]), np.array([0.03]), np.array([-0.02])
    f = reference.equilibrium(np, rho, ux, uy)
    r, u, v = reference.moments(f)
    np.testing.assert_allclose([r[0], u[0], v[0]], [1.02, 0.03, -0.02], rtol=1e-14)


def test_collision_conserves_mass_and_momentum_without_force():
    e = Engine(preset(grid={"nx": 8, "ny": 6}, physics={"tau": 0.7, "precision": "fp64"}), get_backend("numpy"))
    e.random_state(np.random.default_rng(0))
    g = e.state_arrays()["f"]
    post = reference.collide(np, g, e.lat)
    for a, b in zip(reference.moments(g), reference.moments(post)):
        np.testing.assert_allclose(b, a, rtol=1e-13)


@pytest.mark.parametrize("shifted", [False, True])
def test_paired_bgk_is_the_textbook_bgk_with_guo_forcing(shifted):
    """collide_bgk's paired form (d2q9.cuh, ~80 operations per node) against BGK + Guo written out
    the textbook way, (1 − ω) g + ω f_eq + (1 − ω/2) S with S_i = w_i (3 (c_i − u)·F + 9 (c_i·u)(c_i·F)),
    in fp64 with a body force and on shifted values (g − w)."""
    e = Engine(preset(grid={"nx": 9, "ny": 7}, physics={"tau": 0.63, "precision": "fp64"}), get_backend("numpy"))
    e.random_state(np.random.default_rng(3))
    e.lat.force = (3e-4, -2e-4)
    g = e.state_arrays()["f"] * (1 + 0.02 * (np.random.default_rng(4).random((9, 7, 9)) - 0.5))
    F, om, W, C = np.array(e.lat.force), float(e.lat.omega), d2q9.W, d2q9.C
    rho = g.sum(0)
    u = (np.einsum("iyx,id->dyx", g, C) + 0.5 * F[:, None, None]) / rho
    cu = np.einsum("id,dyx->iyx", C, u)
    usq = (u * u).sum(0)
    feq = W[:, None, None] * rho * (1 + 3 * cu + 4.5 * cu**2 - 1.5 * usq)
    cF = C @ F
    uF = np.einsum("d,dyx->yx", F, u)
    S = W[:, None, None] * (3 * (cF[:, None, None] - uF) + 9 * cu * cF[:, None, None])
    expected = (1 - om) * g + om * feq + (1 - 0.5 * om) * S
    w = W[:, None, None]
    got = reference.collide_bgk(np, g - w, e.lat, shifted=True) + w if shifted else reference.collide_bgk(np, g, e.lat)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)


def test_reynolds_sets_tau():
    p = preset(grid={"n": 102}, physics={"reynolds": 100.0, "lid_velocity": 0.1}, boundaries={"x": "walls", "y": "lid"})
    assert (p.grid.nx, p.grid.ny) == (102, 102)
    np.testing.assert_allclose(p.tau, 3 * 0.1 * 100 / 100 + 0.5)


@pytest.mark.parametrize("raw,needle", [
    ({"physics": {"tau": 0.8, "reynolds": 10.0}}, "exactly one of"),
    ({"physics": {"reynolds": 10.0}}, "needs a moving lid"),
    ({"physics": {"tau": 0.4}}, "greater than 0.5"),
    ({"grid": {"nx": 2}}, "greater than or equal to 4"),
])
def test_bad_presets_are_one_line_errors(raw, needle):
    with pytest.raises(PresetError) as err:
        validate({"engine": "lbm2d", "description": "x", **raw}, "test.toml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bad_image_mask_is_one_clear_line(tmp_path):
    bad = tmp_path / "mask.png"
    bad.write_bytes(b"not a png at all")
    for path, needle in ((bad, "cannot be read as an image"), (tmp_path / "none.png", "does not exist")):
        with pytest.raises(PresetError) as err:
            validate({"engine": "lbm2d", "description": "x",
                      "obstacle": {"kind": "image", "path": str(path)}}, "t.toml")
        msg = str(err.value)
        assert needle in msg and "obstacle.path" in msg and str(path) in msg and "\n" not in msg


def test_image_mask_dark_pixels_are_solid_top_row_is_top(tmp_path):
    img = np.full((10, 20), 255, dtype=np.uint8)
    img[0:2, 0:5] = 0  # top-left corner of the picture
    Image.fromarray(img).save(tmp_path / "m.png")
    p = preset(grid={"nx": 20, "ny": 10}, obstacle={"kind": "image", "path": str(tmp_path / "m.png")})
    mask = reference.build_mask(p)
    assert mask[-2:, :5].all() and mask.sum() == 10  # y grows upwards: image top = last rows


def test_masks_of_boundaries():
    p = preset(grid={"nx": 12, "ny": 10}, boundaries={"x": "walls", "y": "lid"})
    m = reference.build_mask(p)
    assert (m[0] == 1).all() and (m[:, 0] == 1).all() and (m[:, -1] == 1).all()
    assert (m[-1, 1:-1] == 2).all()
    p = preset(grid={"nx": 12, "ny": 10}, boundaries={"x": "inlet-outlet"}, physics={"tau": 0.7},
               obstacle={"kind": "circle", "diameter": 4, "center": [0.5, 0.5]})
    m = reference.build_mask(p)
    assert (m[:, 0] == 3).all() and (m[:, -1] == 4).all() and (m == 1).sum() > 4


def test_wall_velocity_reaches_the_fluid():
    e = Engine(preset(grid={"n": 24}, physics={"tau": 0.8, "precision": "fp64", "lid_velocity": 0.05},
                      boundaries={"x": "walls", "y": "lid"}), get_backend("numpy"))
    e.step(300)
    ux = np.asarray(e.fields()["ux"].data)
    assert ux[-2, 12] > 0.02 and ux[5, 12] < 0  # dragged along under the lid, return flow below


def test_tracers_move_with_the_flow_and_recycle():
    p = preset(grid={"nx": 40, "ny": 20}, physics={"tau": 0.8}, initial={"kind": "uniform", "u0": 0.1},
               tracers={"count": 50, "rate": 5, "every": 1, "line": [0.1, 0.2, 0.1, 0.8]})
    shape = p.shape
    t = Tracers(np, p.tracers, shape, np.zeros(shape, bool))
    ux, uy = np.full(shape, 0.5, np.float32), np.zeros(shape, np.float32)
    t.advance(ux, uy, 1.0)
    released = t.age >= 0
    assert released.sum() == 5
    x0 = t.pos[released, 0].copy()
    t.advance(ux, uy, 1.0)
    np.testing.assert_allclose(t.pos[released, 0], x0 + 0.5, rtol=1e-6)
    for _ in range(200):
        t.advance(ux, uy, 1.0)
    assert (t.pos[:, 0] <= 39).all() and (t.pos[:, 0] >= 0).all()  # left the box → recycled


def test_tracer_velocity_on_the_box_edges_is_the_edge_nodes():
    """On the last node lines (x = nx − 1, y = ny − 1, and just inside them in float32) the bilinear
    velocity is the edge nodes' own, never a node past the row (an IndexError on NumPy, a read
    past the row on the GPU): a long-lived tracer reaches the outlet."""
    p = preset(grid={"nx": 40, "ny": 20}, tracers={"count": 4, "rate": 1, "every": 1})
    ny, nx = p.shape
    t = Tracers(np, p.tracers, p.shape, np.zeros(p.shape, bool))
    ux = np.arange(ny * nx, dtype=np.float32).reshape(ny, nx)
    uy = -ux
    pos = np.array([[nx - 1, 3.0], [5.0, ny - 1], [nx - 1, ny - 1], [np.nextafter(np.float32(nx - 1), 0), 3.0]],
                   np.float32)
    v = t.velocity(ux, uy, pos)
    want = np.array([ux[3, nx - 1], ux[ny - 1, 5], ux[ny - 1, nx - 1], ux[3, nx - 1]], np.float32)
    np.testing.assert_allclose(v[:, 0], want, rtol=1e-6)
    np.testing.assert_allclose(v[:, 1], -want, rtol=1e-6)


def test_tracer_integrator_is_second_order_in_a_vortex():
    """Midpoint rule in solid-body rotation: radius drift is O(dt³) per step (Euler: O(dt²))."""
    p = preset(grid={"nx": 41, "ny": 41}, tracers={"count": 1, "rate": 1})
    y, x = np.mgrid[0:41, 0:41].astype(np.float32)
    om = 0.01
    ux, uy = -om * (y - 20), om * (x - 20)
    drifts = []
    for dt in (4.0, 2.0):
        t = Tracers(np, p.tracers, p.shape, np.zeros(p.shape, bool))
        t.age[:] = 0
        t.pos[:] = [[30.0, 20.0]]
        t.cfg = t.cfg.model_copy(update={"rate": 0})
        for _ in range(int(200 / dt)):
            t.advance(ux, uy, dt)
        drifts.append(abs(np.hypot(t.pos[0, 0] - 20, t.pos[0, 1] - 20) - 10))
    assert drifts[0] / drifts[1] > 3.0  # second order: halving dt divides the error by ~4


def test_variant_availability_reasons():
    p = Engine.equivalence_presets()["fp32-channel"]
    ax = registry.axes("lbm2d")
    sel = registry.default_selection("lbm2d", "cupy")
    stb = registry.unavailable_reason(ax["kernel"].choices["stb"], "cupy", dict(sel, kernel="stb"), p)
    assert "inlet/outlet" in stb
    p = Engine.equivalence_presets()["fp32-walls-obstacle"]
    stb = registry.unavailable_reason(ax["kernel"].choices["stb"], "cupy", dict(sel, kernel="stb"), p)
    assert stb == "temporal-blocking kernels not built yet" or stb is None
    fp16 = registry.unavailable_reason(ax["storage"].choices["fp16"], "numpy", dict(sel, kernel="reference",
                                                                                     storage="fp16"),
                                       Engine.equivalence_presets()["fp64-cavity"])
    assert "fp64" in fp16
    with pytest.raises(VariantUnavailable):
        Engine(p, get_backend("numpy"), variants={"kernel": "fused"})


def test_live_switch_to_fp16_and_back_keeps_the_state():
    p = Engine.equivalence_presets()["fp32-walls-obstacle"]
    e = Engine(p, get_backend("numpy"))
    e.random_state(np.random.default_rng(3))
    e.step(10)
    before = np.asarray(e.state_arrays()["f"]).copy()
    e.set_variant(storage="fp16")
    assert e.bytes_per_update() == 36 and e.f.dtype == np.float16
    np.testing.assert_allclose(e.state_arrays()["f"], before, atol=5e-4)  # one fp16 rounding of f − w
    e.set_variant(storage="native")
    assert e.bytes_per_update() == 72
    np.testing.assert_allclose(e.state_arrays()["f"], before, atol=5e-4)


def test_checkpoint_restore_round_trip():
    p = Engine.equivalence_presets()["fp64-cavity"]
    a = Engine(p, get_backend("numpy"))
    a.random_state(np.random.default_rng(1))
    a.step(3)
    ck = a.checkpoint()
    b = Engine(p, get_backend("numpy"))
    b.restore(ck)
    a.step(5)
    b.step(5)
    np.testing.assert_array_equal(b.state_arrays()["f"], a.state_arrays()["f"])


def test_bench_cases_and_bytes():
    labels = [c[0] for c in Engine.bench_cases()]
    assert labels == ["320x320", "1024x1024", "4096x4096", "8192x8192"]
    e = Engine(Engine.equivalence_presets()["fp32-walls-obstacle"], get_backend("numpy"))
    assert e.bytes_per_update() == 72


def test_tracers_keep_pace_with_the_flow_whatever_the_frame_size():
    """Uniform flow u0: a released tracer moves u0 per step, however steps are batched."""
    raw = {"grid": {"nx": 200, "ny": 20}, "physics": {"tau": 0.8}, "initial": {"kind": "uniform", "u0": 0.1},
           "tracers": {"count": 100, "rate": 1, "every": 2, "release": "points", "points": [[0.05, 0.5]]}}
    xs = []
    for batch in (2, 10, 30):
        e = Engine(preset(**raw), get_backend("numpy"))
        e.step(2)  # first release
        first = int(np.argmax(np.asarray(e.tracers.age)))
        x0 = float(e.tracers.pos[first, 0])
        for _ in range(60 // batch):
            e.step(batch)
        xs.append(float(e.tracers.pos[first, 0]) - x0)
    np.testing.assert_allclose(xs, 0.1 * 60, rtol=1e-3)

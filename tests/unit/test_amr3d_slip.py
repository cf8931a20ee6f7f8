"""amr3d free-slip sides (issue 16): specular reflection at the half-way wall, c' = c − 2(c·n)n,
built into the pull tables (tables._reflect_slip) and so into the GPU fix-up descriptors.

- the reflection table and the side checks (one-line refusals, preset key),
- physics on the NumPy reference: a closed box conserves mass to round-off (also where free-slip
  sides meet walls: bounce-back wins at those edges and the pairing stays one to one); a uniform
  flow along free-slip sides stays uniform to round-off on one, two and three levels (walls slow
  it); a flow into a free-slip side is stopped while its tangential momentum is kept to round-off;
  a channel half with a free-slip mid-plane equals the full channel's half to round-off,
- the GPU's orchestration (NumpyKernels) against the reference on two- and three-level trees,
  with a body, an inlet and an outflow too,
- the CUDA kernels through the g++ emulation (every tree rung, the engine on the emulated backend),
- and gpu-marked mirrors of the emulated tests for a real GPU.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import boundaries, d3q27, interface, reference, tables
from nagare.engine.amr3d.config import AMR3DPreset
from nagare.engine.amr3d.tree import Forest
from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
from nagare.engine.backend import get_backend
from nagare.engine.timing import PhaseTimer

from tests.unit.test_amr3d_flows import Slab, _lattice, sphere_tree
from tests.unit.test_amr3d_tree_stepper import (
    assert_gpu_tree_stepper_equals_numpy_kernels,
    flow_state,
    three_levels,
    two_levels,
)

C, Q, OPP, REFLECT = d3q27.C, d3q27.Q, d3q27.OPP, d3q27.REFLECT
M = 9
SIDES = ("x-", "x+", "y-", "y+", "z-", "z+")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")


def node_sums(forest: Forest, f) -> np.ndarray:
    """(ρ, j_x, j_y, j_z) summed over the distinct nodes of a one-level forest (each stored copy of a
    shared node counted once): what streaming and collision conserve. (reference.mass weights the
    nodes on a non-periodic side ½, as the trapezoidal rule does, so it is not this sum there.)"""
    X = np.round(reference.point_coordinates(forest).reshape(-1, 3) * (1 << forest.max_level)).astype(np.int64)
    _, first = np.unique(forest.wrap_points(X)[0], axis=0, return_index=True)
    mom = np.stack(d3q27.moments(np, np.asarray(f, np.float64)))
    return mom.reshape(4, -1)[:, first].sum(axis=1)


def smooth_state(forest: Forest, phys, amp=0.03, seed=0):
    X = reference.point_coordinates(forest)
    rng = np.random.default_rng(seed)
    ph = rng.uniform(0, 6.3, size=6)
    u = amp * np.stack([np.sin(X[..., 1] / 3 + ph[c]) * np.cos(X[..., 2] / 4 + ph[c + 3]) + 0.3 * np.cos(X[..., 0] / 5)
                        for c in range(3)])
    rho = 1 + 0.01 * np.cos(X[..., 0] / 5 + ph[0])
    return reference.init_state(np, forest, phys, rho, u)


# ---- the table and the checks ------------------------------------------------------------------------
def test_reflect_table_negates_the_named_components():
    for mask in range(8):
        sign = np.array([-1 if mask >> d & 1 else 1 for d in range(3)])
        np.testing.assert_array_equal(C[REFLECT[mask]], C * sign)
        np.testing.assert_array_equal(REFLECT[mask][REFLECT[mask]], np.arange(Q))  # an involution
        np.testing.assert_array_equal(d3q27.W[REFLECT[mask]], d3q27.W)
    np.testing.assert_array_equal(REFLECT[7], OPP)


@pytest.mark.parametrize("sides, words", [(("y-",), "periodic axis"), (("x-", "x-"), "twice"), (("w+",), "one of")])
def test_free_slip_sides_are_checked(sides, words):
    forest = Forest.uniform((1, 1, 1), 0, M, 0, (False, True, False))
    with pytest.raises(ValueError, match=words):
        tables.slip_sides(forest, sides)
    assert tables.slip_sides(forest, ("z+", "x-")) == ("x-", "z+")
    with pytest.raises(ValueError, match="both the inlet and free-slip"):
        boundaries.build(forest, inlet="x-", slip=("x-", "z+"))


def test_mirrored_sources_reach_every_kind_of_source():
    """On a two-level tree the free-slip side points read mirrored nodes of their own leaf, of a
    same-level leaf, of the finer level (fine buffer) and of the coarser one (interpolation)."""
    forest = two_levels((True, False, False))
    t = tables.build(forest, slip=("y-", "y+", "z-"))
    N = forest.n_leaves * M ** 3
    kinds = set()
    for lt in t.level.values():
        stride = lt.n * M ** 3
        dq, sq = lt.direct_dst // stride, lt.direct_src // N
        if np.any((sq != dq) & (sq != OPP[dq])):
            kinds.add("direct")
        if np.any(lt.fine_dst // stride != lt.fine_q):
            kinds.add("fine")
        if np.any(lt.coarse_dst // stride != lt.coarse_q):
            kinds.add("coarse")
    assert kinds == {"direct", "fine", "coarse"}


# ---- physics on the reference --------------------------------------------------------------------------
@pytest.mark.parametrize("periodic, slip", [
    ((False, False, False), SIDES),                      # a closed box of free-slip sides
    ((False, False, False), ("x-", "y-", "y+", "z+")),   # free slip meets walls at edges and corners
    ((True, False, False), ("y+", "z-")),
], ids=["all-free-slip", "mixed-walls", "periodic-x"])
@pytest.mark.parametrize("roots", [(1, 1, 1), (2, 2, 2)])
def test_closed_box_with_free_slip_sides_conserves_mass_to_round_off(periodic, slip, roots):
    """Every population leaving through a side is read back by exactly one link (specular
    reflection pairs links crossing the same free-slip sides, bounce-back those crossing a wall), so
    Σρ over the distinct nodes is conserved to round-off (fp64: measured ≤ 2.4e-14 relative after
    30 steps, the size of the drift between bounce-back walls; tested at 1e-13); the flow does feel
    the sides (it differs from the all-wall box)."""
    forest = Forest.uniform(roots, 0, M, 0, periodic)
    phys = reference.Physics(0.6)
    f0 = smooth_state(forest, phys)
    st = reference.Stepper(np, forest, phys, f0.copy(), bnd=boundaries.build(forest, slip=slip))
    m0 = node_sums(forest, f0)[0]
    st.step(30)
    assert abs(node_sums(forest, st.f)[0] - m0) <= 1e-13 * m0
    walls = reference.Stepper(np, forest, phys, f0.copy())
    walls.step(30)
    assert np.abs(walls.f - st.f).max() > 1e-3


@pytest.mark.parametrize("case", ["one-level", "two-levels", "three-levels"])
def test_uniform_flow_along_free_slip_sides_stays_uniform(case):
    """A uniform flow parallel to free-slip sides feels no stress: the reflected equilibrium is the
    equilibrium, so the state stays uniform to round-off (fp64, measured ≤ 4e-16 after 10 steps),
    across levels too; bounce-back walls make boundary layers (the speed at the wall nodes drops by
    ~0.045 of 0.05 in 10 steps)."""
    forest = {"one-level": lambda: Forest.uniform((2, 2, 2), 0, M, 0, (True, False, False)),
              "two-levels": lambda: two_levels((True, False, False)),
              "three-levels": lambda: three_levels((False, False, True))}[case]()
    X = reference.point_coordinates(forest)
    along = forest.periodic.index(True)
    u = np.zeros((3,) + X.shape[:-1])
    u[along] = 0.05
    phys = reference.Physics(0.51 if forest.max_level == 2 else 0.56)
    f0 = reference.init_state(np, forest, phys, np.ones(X.shape[:-1]), u)
    sides = tuple(s for s in SIDES if not forest.periodic["xyz".index(s[0])])
    slip = reference.Stepper(np, forest, phys, f0.copy(), bnd=boundaries.build(forest, slip=sides))
    walls = reference.Stepper(np, forest, phys, f0.copy())
    slip.step(10)
    walls.step(10)
    np.testing.assert_allclose(slip.f, f0, rtol=0, atol=1e-15)
    _, *uw = d3q27.fluid_velocity(np, walls.f)
    assert np.abs(np.stack(uw) - u).max() > 0.02


def test_flow_into_a_free_slip_side_is_stopped_and_keeps_its_tangential_momentum():
    """Uniform u = (0.02, 0.03, 0) between free-slip sides normal to y (x, z periodic): no mass
    crosses them (Σρ to round-off: 1.1e-14 relative measured, 1e-13 tested); the normal flow turns
    into sound waves that decay, so the net mass flux through every plane between two node layers
    falls below 1e-3 of its start within 250 steps at τ = 1.5 (a periodic y keeps it); and the
    tangential momentum J_x is conserved to round-off — no shear stress (bounce-back walls take it:
    J_x falls below half). (J_y itself
    keeps an odd–even pattern across the 9 layers, ±0.0033 a node: a lattice mode, the same between
    bounce-back walls, which the flux between layers does not see.)"""
    up, down = C[:, 1] == 1, C[:, 1] == -1

    def run(periodic, slip, steps=250):
        forest = Forest.uniform((1, 1, 1), 0, M, 0, periodic)
        n, idx = _lattice(forest, 0, periodic)
        X = reference.point_coordinates(forest)
        u = np.zeros((3,) + X.shape[:-1])
        u[0], u[1] = 0.02, 0.03
        phys = reference.Physics(1.5)
        f0 = reference.init_state(np, forest, phys, np.ones(X.shape[:-1]), u)
        st = reference.Stepper(np, forest, phys, f0.copy(), bnd=boundaries.build(forest, slip=slip))
        st.step(steps)

        def flux(f):  # through the planes y + ½ between the node layers: Σ f*_{c_y=+1}(y) − Σ f*_{c_y=−1}(y+1)
            U = np.empty((Q, n[2], n[1], n[0]))
            U[(slice(None),) + idx] = f
            a, b = U[up].sum(axis=(0, 1, 3)), U[down].sum(axis=(0, 1, 3))
            return a[:-1] - b[1:] if not periodic[1] else a - np.roll(b, -1)
        return node_sums(forest, f0), node_sums(forest, st.f), np.abs(flux(f0)).max(), np.abs(flux(st.f)).max()

    (m0, jx0, _, _), (m, jx, _, jz), flux0, flux = run((True, False, True), ("y-", "y+"))
    assert abs(m - m0) <= 1e-13 * m0
    assert abs(jx - jx0) <= 1e-13 * jx0 and abs(jz) < 1e-12
    assert flux0 > 0.1 and flux < 1e-3 * flux0
    _, (_, jx_w, _, _), _, _ = run((True, False, True), ())
    assert jx_w < 0.5 * jx0
    _, (_, _, jy_p, _), flux0_p, flux_p = run((True, True, True), ())
    np.testing.assert_allclose(flux_p, flux0_p, rtol=1e-10)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_channel_half_with_a_free_slip_mid_plane_equals_the_full_channel(dtype, tol):
    """A channel (x, z periodic) of 18 fluid nodes across y, walls half-way beyond nodes 0 and 17:
    a wall side at y = −½ and a slab body whose half-way wall is at 17.5 (node-centred leaves have
    an odd number of nodes across a walled axis, so the second wall comes from a body). Its
    mid-plane is y = 8.5. The half channel, nodes 0 … 8 with a free-slip side at 8.5, must be the
    full channel's lower half, and the upper half its mirror image, at every step — here a
    transient 3D flow with a non-equilibrium part and a body force along the walls, 100 steps.
    Tolerance: round-off only, not a discretisation error: the full channel's mirrored halves
    collide with sums over the 27 populations in another order (measured 4.4e-16 in fp64 and
    2.7e-7 in fp32 on populations ≤ 0.3, not growing over the 100 steps)."""
    per = (True, False, True)
    half = Forest.uniform((2, 1, 1), 0, M, 0, per)
    full = Forest.uniform((2, 3, 1), 0, M, 0, per)  # nodes 0 … 24 across y; the slab takes 18 … 24
    nh, ih = _lattice(half, 0, per)
    nf, iff = _lattice(full, 0, per)
    nx, ny, nz = nh
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    kx, kz = 2 * np.pi / nx, 2 * np.pi / nz
    rho = 1 + 0.01 * np.cos(kx * x + 0.3) * np.cos(kz * z)
    ux = 0.03 * np.cos(kz * z) * np.sin(np.pi * (y + 0.5) / 18) + 0.01
    uy = 0.02 * np.sin(kx * x) * np.sin(2 * np.pi * (y + 0.5) / 18)
    uz = 0.02 * np.cos(kx * x + 1) * np.cos(np.pi * (y + 0.5) / 9)
    noise = np.random.default_rng(3).standard_normal((Q,) + rho.shape)
    G = d3q27.equilibrium(np, rho, ux, uy, uz) * (1 + 0.003 * noise)
    Gf = np.empty((Q, nz, nf[1], nx))
    Gf[:, :, :9] = G
    Gf[:, :, 17:8:-1] = G[REFLECT[2]]  # the mirror image about y = 8.5
    Gf[:, :, 18:] = boundaries.rest_values(np.float64)[:, None, None, None]
    phys = reference.Physics(0.62, (2e-5, 0.0, 1e-5))
    sh = reference.Stepper(np, half, phys, np.ascontiguousarray(G[(slice(None),) + ih], dtype),
                           bnd=boundaries.build(half, slip=("y+",)))
    sf = reference.Stepper(np, full, phys, np.ascontiguousarray(Gf[(slice(None),) + iff], dtype),
                           bnd=boundaries.build(full, [Slab(0.0, 17.75, (16, 24, 8))]))
    wall = reference.Stepper(np, half, phys, np.ascontiguousarray(G[(slice(None),) + ih], dtype))
    for _ in range(5):
        sh.step(20)
        sf.step(20)
        Uh = np.empty((Q, nz, ny, nx), dtype)
        Uh[(slice(None),) + ih] = sh.f
        Uf = np.empty((Q, nz, nf[1], nx), dtype)
        Uf[(slice(None),) + iff] = sf.f
        np.testing.assert_allclose(Uf[:, :, :9], Uh, rtol=0, atol=tol)
        np.testing.assert_allclose(Uf[:, :, 17:8:-1], Uh[REFLECT[2]], rtol=0, atol=tol)
    assert np.abs(Uh - G).max() > 1e-3  # the flow moved
    wall.step(100)
    assert np.abs(wall.f - sh.f).max() > 1e-3  # and a wall at 8.5 would not be the mid-plane


# ---- the GPU's orchestration (NumpyKernels) and the reference ------------------------------------------
@pytest.mark.parametrize("forest_fn, periodic, slip", [
    (two_levels, (True, False, False), ("y-", "y+", "z-")),
    (three_levels, (False, False, True), ("x-", "y-", "y+")),
], ids=["two-levels", "three-levels"])
def test_tree_stepper_with_numpy_kernels_equals_the_reference(forest_fn, periodic, slip):
    forest = forest_fn(periodic)
    phys = reference.Physics(0.56 if forest.max_level == 1 else 0.51, (1e-5, 0.0, -2e-5))
    bnd = boundaries.build(forest, slip=slip)
    ref = reference.Stepper(np, forest, phys, flow_state(forest, phys), bnd=bnd)
    cpl = interface.build(forest, slip=bnd.slip)
    st = TreeStepper(np, forest, cpl, phys.tau0, phys.accel0, NumpyKernels(), PhaseTimer(get_backend("numpy")),
                     dtype=np.float64, bnd=bnd)
    st.set_state(ref.f.copy())
    walls = reference.Stepper(np, forest, phys, ref.f.copy())
    for _ in range(3):
        ref.step(1)
        st.advance(1)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    walls.step(3)
    assert np.abs(walls.f - ref.f).max() > 1e-3


def test_free_slip_sides_with_a_body_an_inlet_and_an_outflow():
    """Free-slip y sides with the sphere tree's inlet, outflow and interpolated body walls: the
    fix-up list holds the body's points and the sides' (their union), NumpyKernels = reference."""
    forest0, body = sphere_tree(2)
    forest = Forest(forest0.roots, forest0.m, forest0.max_level, (False, False, True), forest0.level, forest0.block)
    u_in = (0.04, 0.0, 0.0)
    bnd = boundaries.build(forest, [body], "x-", "x+", u_in, "interpolated", slip=("y-", "y+"))
    phys = reference.Physics(0.53)
    X = reference.point_coordinates(forest)
    u = np.stack([np.full(X.shape[:-1], u_in[0]), 0.01 * np.sin(X[..., 0] / 4), np.zeros(X.shape[:-1])])
    f0 = reference.init_state(np, forest, phys, np.ones(X.shape[:-1]), u)
    for lv, b in bnd.level.items():
        boundaries.apply(np, f0.reshape(Q, -1), b, forest.level_slice(lv).start * M ** 3, u_in)
    ref = reference.Stepper(np, forest, phys, f0.copy(), bnd=bnd)
    cpl = interface.build(forest, "quadratic", bnd.solid, bnd.near(), bnd.links(), bnd.slip)
    st = TreeStepper(np, forest, cpl, phys.tau0, (0.0, 0.0, 0.0), NumpyKernels(), PhaseTimer(get_backend("numpy")),
                     dtype=np.float64, bnd=bnd)
    st.set_state(ref.f.copy())
    for _ in range(2):
        ref.step(2)
        st.advance(2)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    np.testing.assert_allclose(st.body_force(), ref.body_force(), rtol=1e-12, atol=1e-15)


# ---- the preset ------------------------------------------------------------------------------------------
SLIP_SETS = ["grid.periodic=[false, false, false]", "grid.free_slip=['y-', 'y+', 'z-', 'z+']"]


@pytest.mark.parametrize("grid, flow, words", [
    ({"periodic": [False, True, True], "free_slip": ["y-"]}, {}, "needs grid.periodic[1] = false"),
    ({"periodic": [False, False, True], "free_slip": ["y-", "y-"]}, {}, "names a side twice"),
    ({"periodic": [False, False, True], "free_slip": ["x-", "y+"]}, {"inlet": "x-", "velocity": [0.05, 0, 0]},
     "also in grid.free_slip"),
    ({"periodic": [False, False, True], "free_slip": ["top"]}, {}, "free_slip"),
])
def test_preset_refuses_impossible_free_slip_sides_in_one_line(grid, flow, words):
    raw = {"engine": "amr3d", "description": "t", "grid": {"leaves": [2, 2, 2], "m": 9, **grid}, "flow": flow}
    with pytest.raises(ValueError) as exc:
        AMR3DPreset.model_validate(raw)
    assert words in str(exc.value)


def test_preset_refusal_through_set_is_one_line():
    from nagare.engine.errors import PresetError
    from nagare.engine.presets import load_preset

    with pytest.raises(PresetError) as exc:
        load_preset("amr3d-periodic", ["grid.periodic=[true, true, true]", "grid.free_slip=['z+']"], backend="numpy")
    assert "grid.periodic[2] = false" in str(exc.value) and "\n" not in str(exc.value)


def test_shipped_presets_keep_their_sides():
    from nagare.engine.presets import load_preset

    for name in ("amr3d-sphere-re20", "amr3d-sphere-re100", "amr3d-ahmed", "amr3d-stl", "amr3d-periodic",
                 "amr3d-bench"):
        assert load_preset(name, backend="numpy").grid.free_slip == [], name


def test_documented_set_runs_the_sphere_between_free_slip_sides():
    """docs/amr3d-flows.md: `--set grid.periodic=[false,false,false] grid.free_slip=[…]` on the
    sphere presets. At the NumPy size: the engine takes the sides (its tables read the mirrored
    nodes, the GPU descriptors are built with them) and runs; the flow is symmetric about the
    sphere's planes, so the lift and side force stay ~0 as with periodic sides."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.presets import load_preset

    over = ["tracers.count=0", "variants.kernels=reference"]
    e = AMR3D(load_preset("amr3d-sphere-re20", over + SLIP_SETS, backend="numpy"), get_backend("numpy"))
    assert e._bnd.slip == ("y-", "y+", "z-", "z+")
    assert e.shape.interface() is not None
    e.step(3)
    c = e.force_coefficients()
    assert np.isfinite(c["cd"]) and c["cd"] > 1.0 and abs(c["cl"]) < 1e-3 and abs(c["cs"]) < 1e-3


# ---- the CUDA source through the g++ emulation (fp32) --------------------------------------------------
@needs_gxx
def test_cuda_tree_stepper_with_free_slip_equals_numpy_kernels(emulated_cupy):
    """TreeStepper with the CUDA kernels on a two-level tree with free-slip sides y−, z+ (and walls
    y+, z−: edges of both kinds) and a body force: the sides go through the fix-up kernel's
    descriptors as the walls do, so every tree rung (naive, split, templates, sorted) gives the
    same bits, and 3 coarse steps equal NumpyKernels (fp32) and the fp64 reference to fp32
    round-off (measured ≤ 3e-7)."""
    from nagare.engine.amr3d.tree_stepper import CupyKernels

    forest = two_levels((True, False, False))
    phys = reference.Physics(0.57, (2e-5, 0.0, 0.0))
    bnd = boundaries.build(forest, slip=("y-", "z+"))
    f0 = flow_state(forest, phys).astype(np.float32)
    cpl = interface.build(forest, slip=bnd.slip)
    host = TreeStepper(np, forest, cpl, phys.tau0, phys.accel0, NumpyKernels(), PhaseTimer(get_backend("numpy")),
                       dtype=np.float32, bnd=bnd)
    host.set_state(f0.copy(), synchronised=False)
    ref = reference.Stepper(np, forest, phys, f0.astype(np.float64), bnd=bnd)
    host.advance(3)
    ref.step(3)
    first = None
    for rung in ("naive", "split", "templates", "sorted"):
        dev = TreeStepper(emulated_cupy, forest, cpl, phys.tau0, phys.accel0,
                          CupyKernels(rung, emulated_cupy.cuda.Stream()), PhaseTimer(get_backend("numpy")),
                          dtype=np.float32, bnd=bnd)
        dev.set_state(f0.copy(), synchronised=False)
        dev.advance(3)
        got = dev.state()
        if first is None:
            first = got
            np.testing.assert_allclose(got, host.state(), rtol=0, atol=2e-6)
            np.testing.assert_allclose(got, ref.f, rtol=0, atol=5e-6)
        np.testing.assert_array_equal(got, first, err_msg=rung)
    walls = reference.Stepper(np, forest, phys, f0.astype(np.float64))
    walls.step(3)
    assert np.abs(walls.f - first).max() > 1e-3  # the sides are free-slip, not walls


@needs_gxx
def test_engine_on_the_emulated_gpu_matches_the_reference_with_free_slip(emulated_cupy):
    """The registry's free-slip preset (fp32-tree2-slip-m9) on the CuPy backend (emulated): rungs
    naive and split match the NumPy reference engine after 4 steps, as the registry test checks on
    a GPU; and the documented sphere --set at the NumPy size (three levels, inlet, outflow,
    interpolated walls, four free-slip sides): 6 steps of the split rung within fp32 round-off of
    the reference engine (measured 4.2e-7), C_d within 1.5e-5 relative."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend

    dev = Backend("cupy", emulated_cupy, _cupy=emulated_cupy)
    preset = AMR3D.equivalence_presets()["fp32-tree2-slip-m9"]
    ref = AMR3D(preset, get_backend("numpy"), variants={"kernels": "reference"})
    assert ref._bnd.slip == ("y-", "z+")
    ref.random_state(np.random.default_rng(1))
    ref.step(4)
    want = ref.state_arrays()["f"]
    for rung in ("naive", "split"):
        e = AMR3D(preset, dev, variants={"kernels": rung})
        e._roofline = 1e12  # (no copy bandwidth to measure)
        e.random_state(np.random.default_rng(1))
        e.step(4)
        np.testing.assert_allclose(np.asarray(e.state_arrays()["f"]), want, rtol=2e-5, atol=2e-6, err_msg=rung)
    from nagare.engine.presets import load_preset

    p = load_preset("amr3d-sphere-re20", ["tracers.count=0"] + SLIP_SETS, backend="numpy")
    ref = AMR3D(p, get_backend("numpy"), variants={"kernels": "reference"})
    e = AMR3D(p, dev, variants={"kernels": "split", "graph": "off"})  # (no graphs in the emulation)
    e._roofline = 1e12
    ref.step(6)
    e.step(6)
    np.testing.assert_allclose(np.asarray(e.state_arrays()["f"]), ref.state_arrays()["f"], rtol=2e-5, atol=3e-6)
    np.testing.assert_allclose(e.force_coefficients()["cd"], ref.force_coefficients()["cd"], rtol=1e-4)


# ---- on a GPU (CuPy): the compiled kernels -----------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("rung", ["naive", "split", "templates", "sorted", "naive-fused"])
def test_gpu_tree_stepper_with_free_slip_equals_numpy_kernels(rung):
    forest = two_levels((True, False, False))
    assert_gpu_tree_stepper_equals_numpy_kernels(forest, reference.Physics(0.57, (2e-5, 0.0, 0.0)), rung,
                                                 graph=rung == "templates",
                                                 bnd=boundaries.build(forest, slip=("y-", "z+")))


@pytest.mark.gpu
def test_gpu_sphere_between_free_slip_sides_matches_the_reference():
    """The documented --set on the sphere preset at the NumPy size, on the GPU (split rung, graph
    on) against the NumPy reference engine: 6 steps within fp32 round-off."""
    pytest.importorskip("cupy")
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.presets import load_preset

    over = ["tracers.count=0"] + SLIP_SETS
    p = load_preset("amr3d-sphere-re20", over, backend="numpy")
    ref = AMR3D(p, get_backend("numpy"), variants={"kernels": "reference"})
    gpu = AMR3D(p, get_backend("cupy"), variants={"kernels": "split", "graph": "on"})
    ref.step(6)
    gpu.step(6)
    np.testing.assert_allclose(gpu.backend.asnumpy(gpu.state_arrays()["f"]), ref.state_arrays()["f"], rtol=2e-5,
                               atol=3e-6)
    np.testing.assert_allclose(gpu.force_coefficients()["cd"], ref.force_coefficients()["cd"], rtol=1e-4)

"""amr3d's test and bench cases and its initial states: the registry test's presets and
companions, what ``nagare bench amr3d`` measures and how P0's table is drawn from it, and the
preset's initial flow (or a random valid state) as populations on a box or a tree."""
from __future__ import annotations

import math

import numpy as np

from ..benchspec import BenchSpec
from . import counts, d3q27, leafgrid, reference, storage, variants
from .config import AMR3DPreset
from .regrid_clock import REGRID_PARTS

FAMILY = variants.FAMILY
# The multi-level benchmark case: P0's box with a centred region refined twice (level 1 over the
# middle half of each axis, level 2 over its middle quarter): 2:1 interfaces on faces, edges and
# corners at two depths, and sub-cycling (level l takes 2^l steps per step).
THREE_LEVELS = ("refine=[{lo=[0.25, 0.25, 0.25], hi=[0.75, 0.75, 0.75], level=1}, "
                "{lo=[0.375, 0.375, 0.375], hi=[0.625, 0.625, 0.625], level=2}]")
# P0 §4: flops and bytes per point and step of the D3Q27 BGK update (the improved roofline).
P0_FLOPS, P0_BYTES = 377, 220


def equivalence_presets():
    base = {"engine": FAMILY, "description": "equivalence test", "initial": {"kind": "random"}}
    return {
        "fp32-2x2x2-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [2, 2, 2], "m": 9}, "physics": {"tau": 0.62, "force": [1e-5, 0, -2e-5]}}),
        "fp32-4x2x2-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [4, 2, 2], "m": 9}, "physics": {"tau": 0.8}}),
        "fp32-3x1x2-m17": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [3, 1, 2], "m": 17}, "physics": {"tau": 0.7}}),
        # two levels, interfaces on faces, edges and corners, P0's trilinear stencil, a body force
        "fp32-tree2-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [3, 2, 2], "m": 9},
            "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
            "physics": {"tau": 0.62, "force": [1e-5, 0, -2e-5], "interp": "linear"}}),
        # three levels, walls normal to y (bounce-back at interface points too), quadratic stencil
        "fp32-tree3-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [4, 2, 4], "m": 9, "periodic": [True, False, True]},
            "refine": [{"lo": [0.4, 0.2, 0.4], "hi": [0.6, 0.4, 0.6], "level": 2}],
            "physics": {"tau": 0.57}}),
        # a flow: a sphere on the finer of two levels (interpolated bounce-back: the link kernel,
        # its points in the fix-up), a velocity inlet and an outflow (the boundary kernels), with
        # the MRT collision and Smagorinsky's LES in every kernel
        "fp32-sphere-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [False, True, True]},
            "body": [{"kind": "sphere", "center": [7.7, 8.1, 8.3], "diameter": 3.0, "level": 1, "band": 0.5}],
            "flow": {"inlet": "x-", "outlet": "x+", "velocity": [0.04, 0.0, 0.0], "wall": "interpolated"},
            "physics": {"tau": 0.56, "collision": "mrt", "les": "smagorinsky", "smagorinsky": 0.16}}),
        # free-slip sides (specular reflection through the fix-up's descriptors) on two levels: y− and z+
        # free slip, y+ a wall (the wall–free-slip edge), z− a wall, x periodic, a body force along x
        "fp32-tree2-slip-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [True, False, False],
                             "free_slip": ["y-", "z+"]},
            "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
            "physics": {"tau": 0.57, "force": [2e-5, 0, 0]}}),
        # Kobayashi's CSM (the coefficient's pre-pass, the fix-up's velocities, the owners' C) on two
        # levels with walls normal to y and a body force
        "fp32-tree2-csm-m9": AMR3DPreset.model_validate({
            **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [True, False, True]},
            "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
            "physics": {"tau": 0.56, "force": [1e-5, 0, -2e-5], "les": "csm"}}),
    }



def equivalence_companions(axis, choice):
    """The graph is checked around the most involved rung (26 class streams captured); fp16
    storage on the fastest rung that has it."""
    if axis == "graph" and choice == "on":
        return {"kernels": "templates"}
    return {"kernels": "naive"} if axis == "storage" and choice == "fp16" else {}



# Steps a vortex-adapt cell runs at least: its tree changes about every 200 steps as the vortex
# moves (the stream carries the core one level-2 leaf per 100 steps; refinement ahead and
# coarsening behind come in the same regrids), so the Regrids table has the first regrid
# (compiles) and several after it.
VORTEX_MIN_STEPS = 2000


def bench_min_steps(case: str) -> int:
    return VORTEX_MIN_STEPS if case == "vortex-adapt" else 0


def bench_spec():
    return BenchSpec(preset="amr3d-bench", cases=bench_cases, selections=bench_selections, batch=16,
                     min_steps=bench_min_steps)



def bench_report(results: list) -> str:
    """P0's table (§4), then the distinct counts and P0's break-even (distinct_report)."""
    return p0_table(results) + distinct_report(results) + regrid_report(results)


def regrid_report(results: list) -> str:
    """The adaptive cells' regrids (Regridding.regrid_figures): per cell the engine's first regrid
    that changed the tree (CuPy compiles its kernels then) apart, the median over the later ones of
    the wall time of one regrid (the device synchronised at its end) and of each of its parts
    (regridding.REGRID_PARTS), and the share of the run's time the regrids took."""
    rows = []
    for r in results:
        x = r.extra if r.ok else {}
        if "regrid_ms" not in x:
            continue
        share = r.phases.get("regrid")

        def ms(key, x=x):
            return f"{x[key]:.1f}" if key in x else "—"
        warm = x.get("regrids_warm", 0)
        parts = [ms(f"regrid_{p}_ms") if warm else "—" for p in REGRID_PARTS]
        rows.append("| " + " | ".join([
            r.case, r.label, ms("regrid_first_ms"), ms("regrid_warm_ms"), *parts, f"{warm:.0f}",
            f"{x.get('leaves', 0):.0f}",
            "—" if share is None or not r.ms_per_step else f"{100 * share / r.ms_per_step:.1f}"]) + " |")
    if not rows:
        return ""
    return "\n".join(["", "## Regrids", "",
                      "ms a regrid that changed the tree during the cell's run, the device synchronised at its "
                      "end only (the host queues a part's device work and goes on: a part's time is its host "
                      "time and the waits it does itself). First: the engine's first such regrid (CuPy compiles its "
                      "elementwise and reduction kernels at their first use). Regrid and its parts: medians "
                      "over the later ones (the parts' medians need not add up to the regrid's): criterion "
                      "(per-leaf vorticity maxima), plan (refine, coarsen, 2:1 balance on the host), coupling "
                      "host / device (the level coupling's tables: host part, descriptors' passes on the "
                      "device), transfer (the populations onto the new tree), synchronise + copies "
                      "(boundaries, restriction, same-level copies), select (the stepper rebuilt: buffers, "
                      "uploads), other, drain (the wait at the end for the device work still queued). Share: "
                      "the regrid phase's part of the measured time (every regrid, "
                      "changed or not).", "",
                      "| case | rung | first (compiles) ms | regrid ms | criterion | plan | coupling host "
                      "| coupling device | transfer | synchronise + copies | select | other | drain | regrids "
                      "| leaves | share of run % |",
                      "|" + "---|" * 16, *rows]) + "\n"


def p0_table(results: list) -> str:
    """P0's table (§4) from the measured cells: per case and rung the inner and outer (shell)
    kernel times, the step, the speed-up over naive, GFLOPS at F = 377 flop a point, and % of
    P0's improved roofline P for the step and for the inner kernel alone (its own points)."""
    rows = []
    for r in results:
        peak = r.extra.get("improved_roofline_gflops") if r.ok else None
        if not peak:
            continue
        naive = next((x for x in results if x.ok and x.case == r.case and x.label == "naive"), None)
        gflops = r.updates_per_s * P0_FLOPS / 1e9
        inner, shell, points = r.phases.get("inner"), r.phases.get("shell"), r.extra.get("inner_points")
        inner_gflops = points / (inner * 1e-3) * P0_FLOPS / 1e9 if inner and points else None

        def cell(v, fmt):
            return "—" if v is None else format(v, fmt)
        cells = [r.case, r.label, cell(inner, ".4f"), cell(shell, ".4f"), f"{r.ms_per_step:.4f}",
                 "—" if naive is None else f"{naive.ms_per_step / r.ms_per_step:.2f}×",
                 f"{gflops:,.0f}", f"{100 * gflops / peak:.1f}", cell(inner_gflops, ",.0f"),
                 cell(None if inner_gflops is None else 100 * inner_gflops / peak, ".1f")]
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return ""
    return "\n".join(["", "## P0's table (§4)", "",
                      f"F = {P0_FLOPS} flop and B = {P0_BYTES} bytes a point and step (112 with fp16 storage); "
                      "P = F / (F/P_peak + B/B_copy) with this GPU's fp32 peak and the copy bandwidth above. "
                      "Points are counted as stored (shared face nodes twice); the inner kernel's figures count "
                      "its own points (indices 1..m−2 of each leaf).", "",
                      "| case | rung | inner ms | outer ms | step ms | speed-up over naive | GFLOPS | % of P "
                      "| inner GFLOPS | inner % of P |", "|" + "---|" * 10, *rows]) + "\n"



def _storage(r) -> str:
    return r.selection.get("storage", "native")


def _distinct_rate(r) -> float:
    """Distinct node updates per second of a measured cell (counts.figures over its time)."""
    return r.extra["distinct_updates_per_step"] / (r.ms_per_step * 1e-3)


def uniform_reference(results: list, storage_kind: str):
    """The uniform rung's cell that the break-even compares with: among the measured cells of the
    `uniform` rung with this storage, those of the largest box (the filling box in the GPU bench:
    the rung at full occupancy), the fastest (with or without the CUDA graph); None if none ran."""
    cells = [r for r in results if r.ok and r.ms_per_step > 0 and r.selection.get("kernels") == "uniform"
             and _storage(r) == storage_kind and "distinct_updates_per_step" in r.extra]
    if not cells:
        return None
    size = max(r.extra["distinct_nodes"] for r in cells)
    return max((r for r in cells if r.extra["distinct_nodes"] == size), key=_distinct_rate)


def distinct_report(results: list) -> str:
    """The measured cells counted honestly (engine/amr3d/counts.py): distinct node updates per
    second and their % of the copy bandwidth beside the as-stored figures, the work share of the
    uniform finest lattice, P0's break-even fraction against the uniform rung measured in the same
    bench, and the effective speed-up over that lattice in time to the same physical time."""
    cells = [r for r in results if r.ok and r.ms_per_step > 0 and r.updates_per_s > 0
             and "distinct_updates_per_step" in r.extra]
    if not cells:
        return ""

    def cell(v, fmt):
        return "—" if v is None else format(v, fmt)
    rows, best = [], {}
    for r in cells:
        x = r.extra
        rate = _distinct_rate(r)
        # same bytes per update and same copy bandwidth as the stored figure: only the count changes
        pct = r.roofline_pct * rate / r.updates_per_s
        share = counts.work_share(x["distinct_updates_per_step"], x["finest_lattice_nodes"], x["finest_steps_per_step"])
        uni = uniform_reference(results, _storage(r))
        urate = _distinct_rate(uni) if uni is not None else None
        even = counts.break_even_fraction(rate, urate) if urate else None
        speedup = counts.effective_speedup(r.ms_per_step, x["finest_lattice_nodes"], x["finest_steps_per_step"],
                                           urate) if urate else None
        rows.append("| " + " | ".join([
            r.case, r.label, f"{r.ms_per_step:.4f}", f"{r.updates_per_s / 1e6:,.1f}", f"{r.roofline_pct:.1f}",
            f"{rate / 1e6:,.1f}", f"{pct:.1f}", f"{100 * share:.2f}", cell(None if even is None else 100 * even, ".1f"),
            cell(speedup, ",.2f")]) + " |")
        if "uniform_points" in x and even is not None and (r.case not in best or rate > best[r.case][1]):
            best[r.case] = (r, rate, even, speedup, share, uni)  # a tree: its fastest rung
    lines = ["", "## Distinct nodes and P0's break-even", "",
             "Stored: every leaf's m³ nodes (as P0 and the table above count; shared face nodes twice). "
             "Distinct: each lattice node once per update of its level; a node where levels meet counts "
             "for the finest level that has it. % copy = that count × the bytes a point update moves / "
             "the copy bandwidth. Work share: the tree's distinct node updates per coarse step over the "
             "uniform lattice at the finest spacing's nodes × its steps in the same physical time. "
             "Break-even (P0 §4): the work share below which the tree beats that lattice, the cell's "
             "distinct rate / the uniform rung's on the largest box with the same storage. Speed-up: "
             "time to the same physical time, that lattice (its nodes × steps / the uniform rung's rate) "
             "over the tree (= break-even / work share).", "",
             "| case | rung | step ms | stored M/s | stored % copy | distinct M/s | distinct % copy "
             "| work share % | break-even % | speed-up over uniform finest |", "|" + "---|" * 10, *rows]
    if any("uniform_points" in r.extra for r in cells) and uniform_reference(results, "native") is None:
        lines.append("\nNo cell of the uniform rung (GPU only) was measured: the break-even and the speed-up "
                     "need its rate.")
    for case, (r, _rate, even, speedup, share, uni) in best.items():
        x = r.extra
        t_uni = counts.uniform_ms_per_step(x["finest_lattice_nodes"], x["finest_steps_per_step"], _distinct_rate(uni))
        lines.append(f"\n- **{case}** (fastest rung {r.label}): P0's break-even {100 * even:.1f} % against "
                     f"{uni.label} on {uni.case} ({_distinct_rate(uni) / 1e6:,.1f} M distinct updates/s); "
                     f"work share {100 * share:.2f} %; effective speed-up over the uniform finest lattice "
                     f"{speedup:,.2f}× ({x['finest_lattice_nodes']:,.0f} nodes × "
                     f"{x['finest_steps_per_step']:g} steps = {t_uni:,.2f} ms against {r.ms_per_step:.2f} ms "
                     "a coarse step)")
    return "\n".join(lines) + "\n"


def bench_cases(backend: str = "cupy"):
    """P0's box (512 leaves of 17³ = 64 mother leaves of 33³), a GPU-filling box (16×), P0's box with
    two refined regions, the sphere at Re 100 and the convected vortex on its adaptive tree, whose
    regrids the report's Regrids table times (on NumPy a small box and a small tree)."""
    if backend == "numpy":  # small: a box, and a tree of two levels of 9³ leaves for the distinct counts
        return [("p0-box-8-leaves", ["grid.leaves=[2, 2, 2]"]),
                ("two-levels-m9", ["grid.leaves=[2, 2, 2]", "grid.m=9", THREE_LEVELS])]
    return [("p0-box-512-leaves", ["grid.leaves=[8, 8, 8]"]),
            ("fill-8192-leaves", ["grid.leaves=[16, 16, 32]"]),
            ("three-levels", ["grid.leaves=[8, 8, 8]", THREE_LEVELS]),
            ("sphere", ["@amr3d-sphere-re100"]),
            ("vortex-adapt", ["@amr3d-vortex-adapt"])]  # regrids as it runs: the bench's Regrids table



def bench_selections(backend: str = "cupy"):
    if backend == "numpy":
        return [("reference", {"kernels": "reference"})]
    rungs = ("naive", "split", "mother-leaf", "templates", "sorted", "split-apart", "naive-fused", "uniform")
    return ([(r, {"kernels": r}) for r in rungs]
            + [(f"{r} graph", {"kernels": r, "graph": "on"})
               for r in ("naive", "templates", "sorted", "naive-fused", "uniform")]
            + [(f"{r} fp16", {"kernels": r, "storage": "fp16"}) for r in ("naive", "uniform", "naive-fused")]
            # fp16 storage on the tree's best rung (on a box naive-fused is naive)
            + [("naive-fused fp16 graph", {"kernels": "naive-fused", "storage": "fp16", "graph": "on"})])


def _flow(p: AMR3DPreset, x, y, z):
    """ρ, (ux, uy, uz) of the preset's initial flow at coordinates in level-0 lattice units."""
    nz, ny, nx = p.shape
    kx, ky, kz = 2 * math.pi / nx, 2 * math.pi / ny, 2 * math.pi / nz
    u0 = p.initial.u0
    rho = np.ones(np.broadcast(x, y, z).shape)
    ux, uy, uz = np.zeros_like(rho), np.zeros_like(rho), np.zeros_like(rho)
    kind = p.initial.kind
    if kind == "taylor-green":
        ux = u0 * np.sin(kx * x) * np.cos(ky * y) * np.cos(kz * z)
        uy = -u0 * np.cos(kx * x) * np.sin(ky * y) * np.cos(kz * z)
        # the pressure of the 3D Taylor–Green vortex, as a density through p = c_s² ρ
        rho = 1 + 3 * (u0 * u0 / 16) * (np.cos(2 * kx * x) + np.cos(2 * ky * y)) * (np.cos(2 * kz * z) + 2)
    elif kind == "shear-wave":
        ux = u0 * np.sin(kz * z)
    elif kind == "uniform":
        ux, uy, uz = (np.full_like(rho, v) for v in p.flow.velocity)
    elif kind == "vortex":
        # u_θ = u0 (r/R) exp(½(1 − r²/R²)) about z, on top of flow.velocity (the convected Gaussian
        # vortex: compact, so the periodic images are negligible for R ≪ the box, and zero net
        # circulation); ρ = 1 − (3/2) u0² exp(1 − r²/R²) balances the centripetal pressure (p = ρ/3)
        c = p.initial.center if p.initial.center is not None else (nx / 2, ny / 2, nz / 2)
        R = p.initial.radius
        dx, dy = x - c[0], y - c[1]
        for d, n in ((0, nx), (1, ny)):  # nearest periodic image
            if p.grid.periodic[d]:
                v = dx if d == 0 else dy
                v = v - n * np.round(v / n)
                dx, dy = (v, dy) if d == 0 else (dx, v)
        g = np.exp(0.5 * (1.0 - (dx * dx + dy * dy) / (R * R)))
        ux = p.flow.velocity[0] - u0 * dy / R * g + 0 * rho
        uy = p.flow.velocity[1] + u0 * dx / R * g + 0 * rho
        uz = p.flow.velocity[2] + 0 * rho
        rho = 1.0 - 1.5 * u0 * u0 * g * g
    elif kind == "random":
        return _smooth_random(np.random.default_rng(p.initial.seed), x, y, z, (nx, ny, nz), u0)
    return rho, (ux, uy, uz)


def _smooth_random(rng, x, y, z, n, u0, modes: int = 6):
    """A random smooth flow: a few periodic Fourier modes evaluated at the coordinates, so every
    stored copy of a node (shared faces, coarse and fine copies) gets the same value."""
    def field(amp):
        out = np.zeros(np.broadcast(x, y, z).shape)
        for _ in range(modes):
            k = rng.integers(-2, 3, size=3)
            ph = rng.uniform(0, 2 * math.pi)
            out += amp / modes ** 0.5 * rng.standard_normal() * np.cos(
                2 * math.pi * (k[0] * x / n[0] + k[1] * y / n[1] + k[2] * z / n[2]) + ph)
        return out
    return 1 + field(0.02), (field(u0), field(u0), field(u0))


def initial_tree_state(p: AMR3DPreset, forest) -> np.ndarray:
    """The preset's initial flow on a tree as post-collision populations (reference.init_state:
    the equilibrium of each level with P0's force term)."""
    X = reference.point_coordinates(forest)
    rho, u = _flow(p, X[..., 0], X[..., 1], X[..., 2])
    phys = reference.Physics(p.physics.tau, tuple(p.physics.force))
    return reference.init_state(np, forest, phys, rho, np.stack(u), dtype=p.physics.dtype)


def random_tree_state(p: AMR3DPreset, forest, rng: np.random.Generator) -> np.ndarray:
    """A random, physically valid state on a tree, equal on every copy of a node: a smooth random
    flow and a small non-equilibrium perturbation that is a smooth function of position too."""
    X = reference.point_coordinates(forest)
    nz, ny, nx = p.shape
    rho, u = _smooth_random(rng, X[..., 0], X[..., 1], X[..., 2], (nx, ny, nz), 0.02)
    f = reference.init_state(np, forest, reference.Physics(p.physics.tau, tuple(p.physics.force)), rho, np.stack(u))
    for q in range(d3q27.Q):  # periodic in the domain: the copies at x = 0 and x = L of a node agree
        k = 2 * math.pi * rng.integers(1, 4, size=3) / np.array([nx, ny, nz])
        f[q] *= 1 + 0.01 * np.sin(X[..., 0] * k[0] + X[..., 1] * k[1] + X[..., 2] * k[2] + rng.uniform(0, 6.3))
    return f.astype(p.physics.dtype)


def random_box_state(p: AMR3DPreset, rng: np.random.Generator) -> np.ndarray:
    """A random, physically valid state on a box (leaf storage, host NumPy): equilibria of a random
    flow, each population perturbed by 1 %."""
    nz, ny, nx = p.shape
    rho = 1 + 0.02 * rng.standard_normal((nz, ny, nx))
    u = 0.04 * rng.standard_normal((3, nz, ny, nx))
    feq = leafgrid.equilibrium(np, rho, *u)
    u0 = feq * (1 + 0.01 * rng.standard_normal(feq.shape))
    return storage.leaves_from_uniform(np, u0, p.grid.m, tuple(p.grid.leaves))


def initial_state(p: AMR3DPreset) -> np.ndarray:
    """The preset's initial condition as equilibrium populations in leaf storage (host NumPy)."""
    nz, ny, nx = p.shape
    z, y, x = np.meshgrid(*(np.arange(n, dtype=np.float64) for n in (nz, ny, nx)), indexing="ij")
    if p.initial.kind == "random":  # independent noise per node (a box stores each node's copies alike)
        rng = np.random.default_rng(p.initial.seed)
        rho = 1 + 0.01 * rng.standard_normal((nz, ny, nx))
        ux, uy, uz = (p.initial.u0 * 0.5 * rng.standard_normal(rho.shape) for _ in range(3))
    else:
        rho, (ux, uy, uz) = _flow(p, x, y, z)
    feq = leafgrid.equilibrium(np, rho, ux, uy, uz)
    return storage.leaves_from_uniform(np, feq, p.grid.m, tuple(p.grid.leaves)).astype(p.physics.dtype)

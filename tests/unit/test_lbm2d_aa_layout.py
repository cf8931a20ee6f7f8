"""The AA in-place streaming scheme of lbm_fused_aa (lbm2d.cu), emulated index by index on NumPy.

The CUDA kernel itself runs only on a GPU (gpu-marked tests); this checks the *algorithm* on any
machine: the two layouts, the slots each thread reads and writes (the same set, distinct between
threads: race-free in place), and that alternating P→Q→P steps reproduce the reference.
"""
from __future__ import annotations

import numpy as np
from nagare.engine.backend import get_backend
from nagare.engine.lbm2d import Engine, d2q9, reference
from nagare.engine.lbm2d.d2q9 import CX, CY, OPP, Q


def slots(mask, from_p):
    """For each fluid node: the flat slots (i·n + node) it reads and writes, as lbm_fused_aa does."""
    ny, nx = mask.shape
    n = nx * ny
    reads, writes = {}, {}
    for y in range(ny):
        for x in range(nx):
            if mask[y, x] != d2q9.FLUID:
                continue
            here = y * nx + x
            r, w = [], []
            for i in range(Q):
                src = ((y - CY[i]) % ny) * nx + (x - CX[i]) % nx
                bounce = mask.flat[src] in (d2q9.SOLID, d2q9.MOVING_WALL)
                if from_p:
                    r.append(i * n + here if bounce else OPP[i] * n + src)
                    w.append(i * n + ((y + CY[i]) % ny) * nx + (x + CX[i]) % nx)
                else:
                    r.append(OPP[i] * n + src if bounce else i * n + here)
                    w.append(OPP[i] * n + here)
            reads[here], writes[here] = r, w
    return reads, writes


def aa_step(A, mask, lat, from_p):
    ny, nx = mask.shape
    flat = A.reshape(-1)
    reads, writes = slots(mask, from_p)
    nodes = sorted(reads)
    g = np.stack([flat[reads[k]] for k in nodes], axis=1)  # (9, nfluid)
    for i in range(Q):  # the moving-wall correction where the source is a moving wall
        src_moving = np.roll(mask, (CY[i], CX[i]), axis=(0, 1)).flat[nodes] == d2q9.MOVING_WALL
        term = np.broadcast_to(lat.wall_term[i], mask.shape)
        g[i] += np.where(src_moving, term.flat[nodes], 0)
    post = reference.collide(np, g[:, :, None], lat)[:, :, 0]
    for col, k in enumerate(nodes):
        flat[writes[k]] = post[:, col]


def test_aa_slots_are_race_free():
    """No slot written by one thread is read or written by another (a bounce-back thread reads its
    own slot and writes the solid neighbour's, which no other thread touches)."""
    p = Engine.equivalence_presets()["fp64-cavity"]
    mask = reference.build_mask(p)
    for from_p in (True, False):
        reads, writes = slots(mask, from_p)
        writer, reader = {}, {}
        for k in writes:
            for s in writes[k]:
                assert s not in writer, "two threads write one slot"
                writer[s] = k
            for s in reads[k]:
                assert s not in reader, "two threads read one slot"
                reader[s] = k
        crossed = [s for s, k in writer.items() if s in reader and reader[s] != k]
        assert not crossed, f"{len(crossed)} slots written by one thread and read by another"
        bounced = sum(sorted(writes[k]) != sorted(reads[k]) for k in writes)
        assert bounced > 0  # the case that matters is exercised


def test_aa_alternating_layouts_match_the_reference():
    for label in ("fp64-cavity", "fp32-walls-obstacle"):
        p = Engine.equivalence_presets()[label]
        e = Engine(p, get_backend("numpy"))
        e.random_state(np.random.default_rng(2))
        f = np.asarray(e.state_arrays()["f"]).astype(np.float64)
        lat = reference.build_lattice(np, e.mask_host, p.tau, p.physics.force, p.wall_velocity, np.float64)
        A = f[OPP].copy()  # layout P
        ref, tmp = f.copy(), np.empty_like(f)
        fluid = e.mask_host == d2q9.FLUID
        for step in range(5):
            aa_step(A, e.mask_host, lat, from_p=step % 2 == 0)
            reference.step(np, ref, tmp, lat)
            ref, tmp = tmp, ref
            if step % 2 == 0:  # now layout Q: f_i(x) = A[i][x + c_i]
                got = np.stack([np.roll(A[i], (-CY[i], -CX[i]), axis=(0, 1)) for i in range(Q)])
            else:  # layout P
                got = A[OPP]
            np.testing.assert_allclose(got[:, fluid], ref[:, fluid], rtol=1e-13, err_msg=f"{label} step {step}")

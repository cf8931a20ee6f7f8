"""The regrid as it was before it ran on the device (host NumPy, a per-leaf loop): the reference the
device path (engine/amr3d/transfer.py, regridding.py) must reproduce bit for bit on NumPy."""
from __future__ import annotations

import numpy as np
from nagare.engine.amr3d import boundaries, d3q27, interface, levels
from nagare.engine.amr3d.builder import build_boundaries
from nagare.engine.amr3d.tree import Forest
from nagare.engine.amr3d.tree_stepper import synchronise_host


def _node_positions(forest: Forest, leaf: int) -> np.ndarray:
    m = forest.m
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    return forest.origin[leaf] + ijk * forest.spacing[leaf]


def transfer(old: Forest, new: Forest, f_old: np.ndarray, tau0: float, accel0=(0.0, 0.0, 0.0)) -> np.ndarray:
    """f on ``new`` from f_old (Q, L_old, m, m, m) on ``old`` (same roots, m, max_level, periodicity)."""
    if (old.roots, old.m, old.max_level, old.periodic) != (new.roots, new.m, new.max_level, new.periodic):
        raise ValueError("transfer needs forests of the same roots, m, max_level and periodicity")
    m, m3, Q = new.m, new.m ** 3, d3q27.Q
    f_old = np.asarray(f_old)
    src = f_old.reshape(Q, -1)
    out = np.empty((Q, new.n_leaves, m, m, m), f_old.dtype)
    same = old.find(new.level, new.block)
    for leaf in range(new.n_leaves):
        lv = int(new.level[leaf])
        if same[leaf] >= 0:
            out[:, leaf] = f_old[:, same[leaf]]
            continue
        cov, cl = old.cover(lv, new.block[leaf][None])
        pos, _ = new.wrap_points(_node_positions(new, leaf))
        if cov[0] >= 0:  # refinement: interpolate from the old coarser leaf
            vals = _prolong(old, int(cov[0]), pos, src)
            vals = levels.rescale(np, vals, tau0, int(cl[0]), lv, accel0)
        else:  # coarsening: inject from the finest old leaf having each node
            vals = np.empty((Q, m3), f_old.dtype)
            todo = np.ones(m3, bool)
            for olv in range(old.max_level, lv, -1):
                if not todo.any():
                    break
                hit = np.where(todo, old.containing(olv, pos), -1)
                s = hit >= 0
                if not s.any():
                    continue
                off = old.local_offset(hit[s], pos[s]) // int(old.spacing_of(olv))
                pid = hit[s] * m3 + (off[:, 2] * m + off[:, 1]) * m + off[:, 0]
                vals[:, s] = levels.rescale(np, src[:, pid], tau0, olv, lv, accel0)
                todo &= ~s
            if todo.any():
                raise ValueError("coarsened leaf has nodes no old leaf holds: forests do not tile alike")
        out[:, leaf] = vals.reshape(Q, m, m, m)
    return out


def _prolong(old: Forest, leaf: int, pos: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Trilinear interpolation of every population at ``pos`` inside old leaf ``leaf``."""
    m, m3 = old.m, old.m ** 3
    h = int(old.spacing[leaf])
    off = old.local_offset(np.full(len(pos), leaf), pos)
    i0 = np.minimum(off // h, m - 2)
    frac = (off - i0 * h) / h  # in [0, 1]; exactly 0 or 1 on coincident nodes
    vals = None
    for corner in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)):
        c = np.asarray(corner)
        idx = i0 + c
        w = np.prod(np.where(c == 1, frac, 1.0 - frac), axis=1)
        term = w * src[:, leaf * m3 + (idx[:, 2] * m + idx[:, 1]) * m + idx[:, 0]]
        vals = term if vals is None else vals + term
    return vals


def regrid(e, plan_forest) -> np.ndarray:
    """The old Regridding.regrid's state on ``plan_forest`` from engine ``e``'s state: the host
    transfer, then boundaries, restriction and same-level copies on the host (old install_tree)."""
    p = e.preset
    f_old = np.asarray(e.backend.asnumpy(e.shape.leaves()))
    f = np.array(transfer(e.forest, plan_forest, f_old, p.physics.tau, e.accel), dtype=e.dtype)
    bnd = build_boundaries(p, plan_forest, e.bodies)
    m3 = p.grid.m ** 3
    f2 = f.reshape(d3q27.Q, -1)
    if bnd is not None:
        for lv, b in bnd.level.items():
            boundaries.apply(np, f2, b, plan_forest.level_slice(lv).start * m3, bnd.inlet_velocity)
        coupling = interface.build(plan_forest, p.physics.interp, bnd.solid, bnd.near(), bnd.links(), bnd.slip)
    else:
        coupling = interface.build(plan_forest, p.physics.interp)
    for lv in sorted(plan_forest.levels, reverse=True):
        if lv in coupling:
            synchronise_host(plan_forest, {lv: coupling[lv]}, f, p.physics.tau, e.accel)
        dst, src = interface.level_copies(plan_forest, lv)
        if dst.size:
            lo = plan_forest.level_slice(lv).start * m3
            f2[:, dst + lo] = f2[:, src + lo]
    return f

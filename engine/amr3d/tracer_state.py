"""The tracers in an amr3d checkpoint: their arrays as stored (finite numbers only), the checks a
checkpoint's tracer arrays pass before a restore, and their load."""
from __future__ import annotations

import numpy as np

from ..errors import CheckpointError
from .config import MAX_TRACERS_PER_SEED
from .tracers import Tracers

PREFIX = "tracers/"
# the axis of the tracer slots in each checkpointed tracer array (state_arrays); the rest is fixed
SLOT_AXIS = {"tracers/positions": 0, "tracers/age": 0, "tracers/alive": 0, "tracers/trail": 1,
             "tracers/trail_valid": 1}


def state_arrays(xp, tracers: Tracers) -> dict:
    """The tracers' state arrays under ``tracers/``: parked tracers and trail samples not yet taken
    are NaN; a checkpoint holds finite numbers only, so those are written as 0 with their validity
    (restored as NaN on load)."""
    t = tracers.state_arrays()
    valid = xp.isfinite(t["trail"]).all(axis=-1)
    t["trail_valid"] = valid
    t["trail"] = xp.where(valid[..., None], t["trail"], 0)
    t["positions"] = xp.where(t["alive"][:, None], t["positions"], 0)
    return {f"{PREFIX}{k}": v for k, v in t.items()}


def check_restorable(tracers: Tracers, arrays: dict, expected: dict) -> None:
    """The tracer arrays may hold another count per seed than the preset's (the app's live control
    changes it; the tracers take it from the arrays): a whole count per seed in the allowed range,
    ``expected`` ({name: (shape, dtype)}) adjusted to it."""
    if "tracers/positions" not in arrays:
        return
    seeds = tracers.n_seeds
    rows = int(np.shape(arrays["tracers/positions"])[0])
    if rows % seeds or not 1 <= rows // seeds <= MAX_TRACERS_PER_SEED:
        raise CheckpointError(f"checkpoint holds {rows} tracers for {seeds} seed points: not a whole "
                              f"count per seed from 1 to {MAX_TRACERS_PER_SEED}; load it with its own preset")
    # the tracer axis of each array (the slots: capacity × seeds), named, not guessed from
    # sizes (a trail of 8 samples and 8 slots have the same length)
    for k, axis in SLOT_AXIS.items():
        if k in expected:
            shape, dtype = expected[k]
            expected[k] = (shape[:axis] + (rows,) + shape[axis + 1:], dtype)


def check_consistent(tracers: Tracers, meta: dict, arrays: dict) -> None:
    """Their step clock is the run's (one advance per coarse step: tracers/step = meta.step), the
    ring cursor lies in the ring, and an alive tracer lies in the domain (level-0 units; a parked
    one is stored at 0) with an age no older than the run. A tracer clock off the run's releases
    and samples at other steps than a straight run would; a tracer far outside is interpolated
    from a clamped leaf."""
    if "tracers/step" not in arrays:
        return
    step = int(meta["step"])
    clock = np.asarray(arrays["tracers/step"]).reshape(-1)
    if clock.size != 1 or int(clock[0]) != step:
        raise CheckpointError(f"state array 'tracers/step' = {clock.tolist()} is not the run's step clock "
                              f"meta.step = {step} (the tracers advance once per coarse step)")
    rows = int(np.shape(arrays["tracers/positions"])[0])
    capacity = rows // tracers.n_seeds
    cursor = np.asarray(arrays["tracers/cursor"]).reshape(-1)
    if cursor.size != 1 or not 0 <= int(cursor[0]) < capacity:
        raise CheckpointError(f"state array 'tracers/cursor' = {cursor.tolist()} is not a ring row "
                              f"(0 … {capacity - 1} for {capacity} tracers per seed)")
    alive = np.asarray(arrays["tracers/alive"]).astype(bool).reshape(-1)
    pos = np.asarray(arrays["tracers/positions"], np.float64).reshape(-1, 3)[alive]
    dom = tracers.lookup.domain
    tol = 1e-3  # level-0 units: far above the positions' fp32 rounding
    for d in range(3):
        out = (pos[:, d] < -tol) | (pos[:, d] > dom[d] + tol)
        if out.any():
            i = int(np.flatnonzero(alive)[np.flatnonzero(out)[0]])
            raise CheckpointError(f"state array 'tracers/positions': {int(out.sum())} alive tracer"
                                  f"{'s lie' if out.sum() > 1 else ' lies'} outside the domain along "
                                  f"{'xyz'[d]} (0 … {dom[d]:g} level-0 units), e.g. tracer {i} at "
                                  f"{np.round(pos[np.flatnonzero(out)[0]], 4).tolist()}")
    age = np.asarray(arrays["tracers/age"], np.float64).reshape(-1)[alive]
    t = float(meta["time"])
    if age.size and (age.min() < 0 or age.max() > t * (1 + 1e-9) + 1e-12):
        raise CheckpointError(f"state array 'tracers/age' holds ages from {age.min():.6g} to {age.max():.6g}, "
                              f"outside 0 … meta.time = {t:.6g}")


def load(xp, tracers: Tracers, arrays: dict) -> None:
    """The tracers' arrays of a checkpoint (NaN restored where the validity says)."""
    t = {k[len(PREFIX):]: v for k, v in arrays.items() if k.startswith(PREFIX)}
    if t:
        t = {k: xp.asarray(v) for k, v in t.items()}
        t["positions"] = xp.where(t["alive"].astype(bool)[:, None], t["positions"], np.nan)
        t["trail"] = xp.where(t.pop("trail_valid").astype(bool)[..., None], t["trail"], np.nan)
        tracers.load_state_arrays(t)

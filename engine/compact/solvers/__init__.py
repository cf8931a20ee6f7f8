"""The compact family's tridiagonal solvers, one module per ``solver`` choice (the protocol: base.py),
and their registry: variants.py registers the axis' choices from :data:`SOLVERS`, the dispatcher
(engine/compact/lines.py) looks the selection's solver up here. A new solver is one module with a
``STRATEGIES`` tuple, listed in :data:`MODULES`.
"""
from __future__ import annotations

from . import gtsv2, iterative, reduction, scan, stream, thomas, tile, window
from .base import Solver

MODULES = (thomas, reduction, scan, tile, window, stream, iterative, gtsv2)
SOLVERS: dict[str, Solver] = {s.name: s for module in MODULES for s in module.STRATEGIES}


def get(name: str) -> Solver:
    try:
        return SOLVERS[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; allowed: {', '.join(SOLVERS)}") from None


def solve(name: str, fac, d, prepared=None, dtype=None):
    """x = A⁻¹ d along the last axis with solver ``name`` on NumPy (``prepared``: what its ``prepare`` made,
    made here when None)."""
    return get(name).solve(fac, prepared, d, dtype)


def fusing() -> str:
    """The solver whose launch computes the explicit right-hand side (``kernel = fused`` runs on it)."""
    return next(s.name for s in SOLVERS.values() if s.fuses_rhs)


def contiguous_only(name: str | None) -> bool:
    """Whether solver ``name`` takes contiguous lines only (its y-lines are always transposed)."""
    solver = SOLVERS.get(name)
    return solver is not None and solver.contiguous_only


# ``y-direction = window``: the y-lines go to this solver whatever ``solver`` says (its strided y-lines are
# coalesced row segments; the scan kernels' are not — variants.py says why)
Y_WINDOW = "window"


def for_axis(selection: dict, axis: str, fac=None, dtype=None) -> str:
    """The solver of the lines along ``axis``: the selection's ``solver``, except y-lines under
    ``y-direction = window`` — where the matrix (``fac``, in ``dtype``) has a halo no longer than a window
    segment. A nearly singular matrix (the filter's, α = 0.49: ~190 rows of halo in fp64 against 64-row
    segments) would read each row ~7 times: its y-lines keep the selection's solver (the NS step at 2048²
    ran 1.6× slower with the filter's y-lines on the window kernel, docs/benchmarks/session-h200-2026-12-02b)."""
    if axis == "y" and selection.get("y-direction") == Y_WINDOW:
        if fac is None or window.halo_fits(fac, dtype):
            return Y_WINDOW
    return selection["solver"]


def names(selection: dict) -> tuple[str, ...]:
    """Every solver a selection runs (the x-lines' first): what its warm-up compiles."""
    return tuple(dict.fromkeys(for_axis(selection, a) for a in ("x", "y")))


def transposes_y(selection: dict, solver: str | None = None) -> bool:
    """Whether y-lines go through a transpose: ``y-direction = transpose``, or a solver that takes
    contiguous lines only (``solver``: the one the y-lines get, :func:`for_axis`; the window solver takes
    them strided)."""
    ydir = selection.get("y-direction")
    name = solver if solver is not None else (Y_WINDOW if ydir == Y_WINDOW else selection.get("solver"))
    if name == Y_WINDOW:
        return False
    return ydir == "transpose" or contiguous_only(name)


__all__ = ["SOLVERS", "Solver", "Y_WINDOW", "contiguous_only", "for_axis", "fusing", "get", "names", "solve",
           "transposes_y"]

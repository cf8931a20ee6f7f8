"""The compact family's tridiagonal solvers, one module per ``solver`` choice (the protocol: base.py),
and their registry: variants.py registers the axis' choices from :data:`SOLVERS`, the dispatcher
(engine/compact/lines.py) looks the selection's solver up here. A new solver is one module with a
``STRATEGIES`` tuple, listed in :data:`MODULES`.
"""
from __future__ import annotations

from . import gtsv2, iterative, reduction, scan, thomas, tile, window
from .base import Solver

MODULES = (thomas, reduction, scan, tile, window, iterative, gtsv2)
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


def transposes_y(selection: dict) -> bool:
    """Whether y-lines go through a transpose: ``y-direction = transpose``, or a solver that takes
    contiguous lines only."""
    return selection.get("y-direction") == "transpose" or contiguous_only(selection.get("solver"))


__all__ = ["SOLVERS", "Solver", "contiguous_only", "fusing", "get", "solve", "transposes_y"]

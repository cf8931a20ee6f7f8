"""Compact finite differences (P4): Lele's 6th-order and Deng's dissipative compact schemes, RK4,
batched tridiagonal solvers (Thomas, CR, PCR, CR–PCR, cuSPARSE) as live variants."""
from .config import CompactPreset as Preset
from .engine import Compact as Engine
from .ns_engine import CompactNavierStokes


def engine_class_for(preset) -> type[Engine]:
    """P4's Navier–Stokes problem has a state of four variables and its own stepping: its engine."""
    return CompactNavierStokes if preset.physics.problem == "navier-stokes" else Engine


__all__ = ["CompactNavierStokes", "Engine", "Preset", "engine_class_for"]

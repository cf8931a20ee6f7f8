"""Compact finite differences (P4): Lele's 6th-order and Deng's dissipative compact schemes, RK4,
batched tridiagonal solvers (Thomas, CR, PCR, CR–PCR, cuSPARSE) as live variants."""
from .config import CompactPreset as Preset
from .engine import Compact as Engine

__all__ = ["Engine", "Preset"]

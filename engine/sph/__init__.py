"""Weakly-compressible SPH with cell-linked and Verlet neighbour lists (P3, DualSPHysics)."""
from .config import SPHPreset as Preset
from .engine import SPH as Engine

__all__ = ["Engine", "Preset"]

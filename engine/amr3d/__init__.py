"""Octree AMR lattice Boltzmann, D3Q27 (P0): leaves of m³ node-centred points, P0's kernel ladder."""
from .config import AMR3DPreset as Preset
from .engine import AMR3D as Engine

__all__ = ["Engine", "Preset"]

"""3D diffusion with the 7-point stencil (P2's test problem)."""
from .config import Diffusion3DPreset as Preset
from .engine import Diffusion3D as Engine

__all__ = ["Engine", "Preset"]

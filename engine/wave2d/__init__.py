"""2D wave equation u_tt = c²∇²u, leapfrog, written once with the stencil framework."""
from .config import Wave2DPreset as Preset
from .engine import Wave2D as Engine

__all__ = ["Engine", "Preset"]

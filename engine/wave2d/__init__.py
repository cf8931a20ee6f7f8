"""2D wave equation u_tt = c²∇²u, leapfrog, written once with the stencil framework."""
from .config import Wave2DPreset as Preset
from .decomp_adapter import Wave2DSlabs as DecompAdapter  # engine/decomp: split into sub-domains
from .engine import Wave2D as Engine

__all__ = ["DecompAdapter", "Engine", "Preset"]

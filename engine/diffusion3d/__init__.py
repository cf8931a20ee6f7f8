"""3D diffusion with the 7-point stencil (P2's test problem)."""
from .config import Diffusion3DPreset as Preset
from .decomp_adapter import Diffusion3DSlabs as DecompAdapter  # engine/decomp: split into sub-domains
from .engine import Diffusion3D as Engine

__all__ = ["DecompAdapter", "Engine", "Preset"]

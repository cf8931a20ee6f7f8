"""D2Q9 lattice Boltzmann in 2D (paper P1): reference, physics, presets and variants."""
from .config import LBM2DPreset as Preset
from .decomp_adapter import LBM2DSlabs as DecompAdapter  # engine/decomp: split into sub-domains
from .engine import LBM2D as Engine

__all__ = ["DecompAdapter", "Engine", "Preset"]

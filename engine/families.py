"""Engine families by name. A family is a package under engine/ exposing ``Engine`` (a subclass
of :class:`nagare.engine.contract.Engine`) and ``Preset`` (its pydantic preset model); importing
it registers its variants. Adding a family = adding one line here.
"""
from __future__ import annotations

import importlib

from .errors import PresetError

FAMILIES: dict[str, str] = {
    "amr3d": "nagare.engine.amr3d",
    "compact": "nagare.engine.compact",
    "diffusion3d": "nagare.engine.diffusion3d",
    "lbm2d": "nagare.engine.lbm2d",
    "sph": "nagare.engine.sph",
    "wave2d": "nagare.engine.wave2d",
}


def family_module(name: str):
    return importlib.import_module(FAMILIES[name])


def load_all() -> None:
    """Import every family (registers all variants)."""
    for name in FAMILIES:
        family_module(name)


def engine_class(name: str):
    return family_module(name).Engine


def preset_model(name: str, source: str = "preset"):
    if name not in FAMILIES:
        raise PresetError(source, "engine", name, f"unknown engine family; allowed: {', '.join(FAMILIES)}")
    return family_module(name).Preset


def create_engine(preset, backend, variants: dict | None = None):
    """Build the engine a validated preset names, on the given backend."""
    return engine_class(preset.engine)(preset, backend, variants=variants)

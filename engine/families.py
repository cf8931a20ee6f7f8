"""Engine families by name. A family is a package under engine/ exposing ``Engine`` (a subclass
of :class:`nagare.engine.contract.Engine`) and ``Preset`` (its pydantic preset model); importing
it registers its variants. Adding a family = adding one line here.

A family package may also expose:

- ``engine_class_for(preset)``: the engine class for a preset when its presets need different
  classes (compact: the Navier–Stokes engine for ``physics.problem = "navier-stokes"``);
  ``Engine`` otherwise;
- ``DecompAdapter``: its adapter to engine/decomp (engine/decomp/adapter.py), when it can run split
  into sub-domains (its preset is then a ``DecomposablePreset``).

Every engine is built through :func:`create_engine` (or the class :func:`engine_class_for` gives).
"""
from __future__ import annotations

import importlib

from .errors import NagareError, PresetError

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
    """The family's ``Engine`` class: its class methods (bench spec, equivalence presets); build an
    engine for a preset with :func:`create_engine`."""
    return family_module(name).Engine


def decomp_adapter(name: str):
    """The family's adapter to engine/decomp, None when it cannot be split."""
    return getattr(family_module(name), "DecompAdapter", None)


def decomposable_families() -> list[str]:
    return [name for name in FAMILIES if decomp_adapter(name) is not None]


def preset_model(name: str, source: str = "preset"):
    if name not in FAMILIES:
        raise PresetError(source, "engine", name, f"unknown engine family; allowed: {', '.join(FAMILIES)}")
    return family_module(name).Preset


def engine_class_for(preset, **decomp):
    """The class that runs ``preset``: the family's ``engine_class_for`` (or its ``Engine``), then,
    for a family with a ``DecompAdapter``, the decomposed class when the preset's ``[decomp] parts``
    is > 1 or ``decomp`` (``parts=``, ``overlap=``, ``transport=``) asks for it."""
    module = family_module(preset.engine)
    choose = getattr(module, "engine_class_for", None)
    cls = choose(preset) if choose is not None else module.Engine
    adapter = getattr(module, "DecompAdapter", None)
    if adapter is not None:
        return adapter.engine_class_for(cls, preset, **decomp)
    if decomp:
        raise NagareError(f"the {preset.engine} family is not decomposed ({', '.join(decomp)} given; "
                          f"decomposed: {', '.join(decomposable_families())})")
    return cls


def create_engine(preset, backend, variants: dict | None = None, **decomp):
    """Build the engine a validated preset names, on the given backend (``decomp``: the keywords of
    a decomposed engine, :func:`engine_class_for`)."""
    return engine_class_for(preset, **decomp)(preset, backend, variants=variants, **decomp)

"""A toy family in one folder, as a new engine would arrive: its preset, its engine with a field
type of its own (a 1-D profile), that type's app handlers, its adapter to engine/decomp (so it
runs split into sub-domains), and nothing edited outside this folder except the one-line
registration in engine/families.py (the test does it with monkeypatch)."""
from . import view  # noqa: F401 - registers the Profile field type's app handlers
from .decomp_adapter import ToySlabs as DecompAdapter
from .engine import ToyEngine as Engine
from .engine import ToyPreset as Preset

__all__ = ["DecompAdapter", "Engine", "Preset"]

"""Atomic writes for exports (the implementation lives in the engine, which saves checkpoints)."""
from nagare.engine.atomic import ExportError, write_atomic, write_text_atomic

__all__ = ["ExportError", "write_atomic", "write_text_atomic"]

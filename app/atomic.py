"""Atomic writes for exports (the one implementation lives in the engine, which saves checkpoints)."""
from nagare.engine.atomic import ExportError, make_folder, remove_stale_temporaries, write_atomic, write_text_atomic

__all__ = ["ExportError", "make_folder", "remove_stale_temporaries", "write_atomic", "write_text_atomic"]

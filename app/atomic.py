"""Atomic writes for exports (the one implementation lives in the engine, which saves checkpoints)."""
from nagare.engine.atomic import (
    ExportError,
    fsync_and_replace,
    make_folder,
    remove_stale_temporaries,
    temp_path,
    write_atomic,
    write_text_atomic,
)

__all__ = ["ExportError", "fsync_and_replace", "make_folder", "remove_stale_temporaries", "temp_path", "write_atomic",
           "write_text_atomic"]

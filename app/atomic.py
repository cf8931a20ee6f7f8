"""Atomic writes for exports (the one implementation lives in the engine, which saves checkpoints)."""
from nagare.engine.atomic import (
    ExportError,
    describe_cause,
    free_bytes,
    fsync_and_replace,
    make_folder,
    output_writer,
    remove_stale_temporaries,
    temp_path,
    write_atomic,
    write_atomic_group,
    write_text_atomic,
)

__all__ = ["ExportError", "describe_cause", "free_bytes", "fsync_and_replace", "make_folder", "output_writer",
           "remove_stale_temporaries", "temp_path", "write_atomic", "write_atomic_group", "write_text_atomic"]

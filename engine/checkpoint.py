"""Checkpoint files: the engine's full state as one .npz (arrays under ``state/``, JSON ``meta``).

The engine side (what goes into a checkpoint, and checking it against a running engine) is
``Engine.checkpoint()`` / ``Engine.restore()`` in contract.py; this module only writes and reads
the file.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from .atomic import write_atomic
from .errors import CheckpointError

CHECKPOINT_FORMAT = 1


def save_checkpoint(ckpt: dict[str, Any], path):
    """Atomic write (temp file + rename) of a checkpoint as .npz; ExportError if it cannot be written."""
    payload = {f"state/{k}": v for k, v in ckpt["arrays"].items()}
    payload["meta"] = np.frombuffer(json.dumps(ckpt["meta"]).encode(), dtype=np.uint8)

    def writer(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **payload)

    return write_atomic(path, writer)


def load_checkpoint(path) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            arrays = {k[len("state/"):]: z[k] for k in z.files if k.startswith("state/")}
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except Exception as exc:
        raise CheckpointError(f"{path}: not a nagare checkpoint ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')} is not {CHECKPOINT_FORMAT}")
    return {"meta": meta, "arrays": arrays}

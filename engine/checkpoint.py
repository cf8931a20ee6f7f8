"""Checkpoint files: the engine's full state as one .npz (arrays under ``state/``, JSON ``meta``).

The engine side (what goes into a checkpoint, and checking it against a running engine) is
``Engine.checkpoint()`` / ``Engine.restore()`` in contract.py; this module writes and reads the
file. ``load_checkpoint`` validates the whole file before anything touches an engine: the meta
schema (format, family, step, time, preset, variants — registered axes and choices of the
family), and every state array (a numeric dtype,
every value finite). Every problem is one CheckpointError line naming the file.
"""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from . import registry
from .atomic import output_writer, write_atomic
from .errors import CheckpointError
from .families import FAMILIES, family_module

CHECKPOINT_FORMAT = 1
_CHUNK = 1 << 22  # elements per finiteness check (bounded temporary memory for large states)


@output_writer("a checkpoint")
def save_checkpoint(ckpt: dict[str, Any], path):
    """Atomic write (temp file + rename) of a checkpoint as .npz; ExportError if it cannot be written."""
    payload = {f"state/{k}": v for k, v in ckpt["arrays"].items()}
    payload["meta"] = np.frombuffer(json.dumps(ckpt["meta"]).encode(), dtype=np.uint8)

    def writer(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **payload)

    return write_atomic(path, writer)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _non_finite(a: np.ndarray) -> int:
    """How many entries of a are NaN or ±Inf (0 for integer and bool arrays)."""
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating)):
        return 0
    flat = a.reshape(-1)
    return int(sum(int(np.count_nonzero(~np.isfinite(flat[i:i + _CHUNK]))) for i in range(0, flat.size, _CHUNK)))


def validate_meta(meta: Any, where: str) -> dict:
    """The checkpoint's meta: raise CheckpointError('<where>: …') unless it is well formed."""
    def bad(what: str):
        raise CheckpointError(f"{where}: {what}")

    if not isinstance(meta, dict):
        bad(f"meta is a {type(meta).__name__}, not an object")
    if meta.get("format") != CHECKPOINT_FORMAT or not _is_int(meta.get("format")):
        bad(f"checkpoint format {meta.get('format')!r} is not {CHECKPOINT_FORMAT}")
    for key in ("family", "step", "time", "preset", "variants"):
        if key not in meta:
            bad(f"meta lacks '{key}'")
    family = meta["family"]
    if not isinstance(family, str) or family not in FAMILIES:
        bad(f"meta.family {family!r} is not an engine family ({', '.join(FAMILIES)})")
    step = meta["step"]
    if not _is_int(step) or step < 0:
        bad(f"meta.step {step!r} is not a non-negative integer")
    t = meta["time"]
    if not _is_number(t) or not math.isfinite(t) or t < 0:
        bad(f"meta.time {t!r} is not a finite non-negative number")
    preset = meta["preset"]
    if not isinstance(preset, dict):
        bad(f"meta.preset is a {type(preset).__name__}, not an object")
    if preset.get("engine") != family:
        bad(f"meta.preset.engine {preset.get('engine')!r} does not match meta.family {family!r}")
    variants = meta["variants"]
    if not isinstance(variants, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, bool)) for k, v in variants.items()):
        bad(f"meta.variants {variants!r} is not an object of axis = choice")
    _check_variant_names(family, variants, where)
    if "preset_hash" in meta and not isinstance(meta["preset_hash"], str):
        bad(f"meta.preset_hash {meta['preset_hash']!r} is not a string")
    if "preset_source" in meta and not isinstance(meta["preset_source"], str):
        bad(f"meta.preset_source {meta['preset_source']!r} is not a string")
    return meta


def _check_variant_names(family: str, variants: dict, where: str) -> None:
    """Every axis and choice of meta.variants registered for the family (availability on this machine
    is decided later, as for a preset's defaults): a bad name is said as the checkpoint file's."""
    family_module(family)  # registers the family's variants
    axes = registry.axes(family)
    for axis, value in variants.items():
        if axis not in axes:
            raise CheckpointError(f"{where}: meta.variants names the axis {axis!r} (= {value!r}), which {family} "
                                  f"does not have (this checkpoint file's variants); axes: {', '.join(axes)}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if text not in axes[axis].choices:
            raise CheckpointError(f"{where}: meta.variants.{axis} = {value!r} (stored in this checkpoint file) is "
                                  f"not a choice of {family}'s variant axis {axis!r}; allowed: "
                                  f"{', '.join(axes[axis].choices)}")


def validate_arrays(arrays: dict[str, np.ndarray], where: str) -> None:
    if not arrays:
        raise CheckpointError(f"{where}: holds no state arrays")
    for name, a in arrays.items():
        if a.dtype.kind not in "biufc":
            raise CheckpointError(f"{where}: state array '{name}' has dtype {a.dtype}, not a number type")
        bad = _non_finite(a)
        if bad:
            raise CheckpointError(f"{where}: state array '{name}' holds {bad} non-finite value"
                                  f"{'s' if bad > 1 else ''} (NaN/Inf) of {a.size}: not a state to resume from")


def load_checkpoint(path) -> dict[str, Any]:
    """Read and validate a checkpoint file; CheckpointError (one line naming the file) if unusable."""
    where = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{where}: no such checkpoint file") from None
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{where}: not a regular file (a checkpoint is a .npz file)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if head[:2] != b"PK":  # np.load takes anything else for a pickle and refuses it as one
        raise CheckpointError(f"{where}: not a nagare checkpoint (not an .npz archive: it does not begin "
                              "as a zip file does)")
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            if "meta" not in z.files:
                raise CheckpointError(f"{where}: not a nagare checkpoint (no 'meta' entry)")
            meta = json.loads(bytes(z["meta"]).decode())
            arrays = {k[len("state/"):]: z[k] for k in z.files if k.startswith("state/")}
    except CheckpointError:
        raise
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise CheckpointError(f"{where}: not a nagare checkpoint ({type(exc).__name__}: {detail})") from None
    validate_meta(meta, where)
    validate_arrays(arrays, where)
    return {"meta": meta, "arrays": arrays}

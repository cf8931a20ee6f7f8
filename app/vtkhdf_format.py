"""What every VTKHDF writer shares (the flat files of app/vtkhdf.py, the octree's OverlappingAMR of
app/vtkhdf_amr.py, the time series of app/vtkhdf_series.py): h5py, and the FieldData block."""
from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .atomic import ExportError, output_writer


def h5py_module():
    """h5py, imported when a file is first written: a dependency in pyproject, but an export should
    say so in one line if it is missing anyway, and nothing else in the app needs it."""
    try:
        import h5py  # optional at run time: only the VTKHDF export uses it
    except ImportError as exc:
        raise ExportError(f"VTKHDF export needs h5py (pip install h5py): {exc}") from None
    return h5py


@output_writer("a VTKHDF file")
@contextmanager
def new_file(tmp: Path | BinaryIO) -> Iterator:
    """A new HDF5 file at ``tmp``, built in memory and written by Python when the block ends.

    HDF5 does not survive a write the disk refuses: after a failed flush its close crashes the
    process (SIGSEGV; h5py issue 914), so a full disk must never reach it. Python's write fails
    cleanly (OSError, which write_atomic turns into one line). The cost is one copy of the file in
    memory while it is written. (A time series reserves its space up front instead:
    app/vtkhdf_series.py.)"""
    buf = io.BytesIO()
    with h5py_module().File(buf, "w") as f:
        yield f
    if hasattr(tmp, "write"):  # a file object given instead of a path (an in-memory export)
        tmp.write(buf.getbuffer())
        return
    with open(tmp, "wb") as out:
        out.write(buf.getbuffer())


def field_data(root, meta: dict | None) -> None:
    """The dataset's FieldData: one-value arrays ``time`` (float64) and ``step`` (int64) where known."""
    g = root.require_group("FieldData")
    for key, dtype in (("time", np.float64), ("step", np.int64)):
        if meta and meta.get(key) is not None:
            g.create_dataset(key, data=np.array([meta[key]], dtype))

"""What every VTKHDF writer shares (the flat files of app/vtkhdf.py, the octree's OverlappingAMR of
app/vtkhdf_amr.py, the time series of app/vtkhdf_series.py): h5py, and the FieldData block."""
from __future__ import annotations

import numpy as np

from .atomic import ExportError


def h5py_module():
    """h5py, imported when a file is first written: a dependency in pyproject, but an export should
    say so in one line if it is missing anyway, and nothing else in the app needs it."""
    try:
        import h5py  # optional at run time: only the VTKHDF export uses it
    except ImportError as exc:
        raise ExportError(f"VTKHDF export needs h5py (pip install h5py): {exc}") from None
    return h5py


def field_data(root, meta: dict | None) -> None:
    """The dataset's FieldData: one-value arrays ``time`` (float64) and ``step`` (int64) where known."""
    g = root.require_group("FieldData")
    for key, dtype in (("time", np.float64), ("step", np.int64)):
        if meta and meta.get(key) is not None:
            g.create_dataset(key, data=np.array([meta[key]], dtype))

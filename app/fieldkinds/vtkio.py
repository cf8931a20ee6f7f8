"""Small helpers the VTK handlers share (legacy binary VTK is big-endian)."""
from __future__ import annotations

import numpy as np


def be_bytes(a, dtype=">f4") -> bytes:
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name) or "field"

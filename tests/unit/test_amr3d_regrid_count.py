"""tools/amr3d_regrid_count.py: a regrid on the counting stand-in for CuPy runs the engine's CuPy
path without a host array in a device operation (CuPy would raise), and its uploads and
read-backs stay batched: the stepper's tables one upload, the coupling's levels one set of passes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "tools" / "amr3d_regrid_count.py"
_spec = importlib.util.spec_from_file_location("amr3d_regrid_count", _PATH)
count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(count)


@pytest.fixture
def counting_cupy(install_cupy):
    return install_cupy(count.counting_cupy())


def test_the_stand_in_refuses_host_arrays_and_counts(counting_cupy):
    cp = counting_cupy
    count.COUNTS.by_part.clear()
    count.COUNTS.part, count.COUNTS.enabled = "p", True
    try:
        a = cp.asarray(np.arange(6))
        b = a * 2 + 1
        with pytest.raises(TypeError):
            _ = a + np.ones(6, np.int64)
        assert int(b.sum()) == 36
        _ = b[a > 2]
    finally:
        count.COUNTS.enabled = False
    c = count.COUNTS.by_part["p"]
    assert c["upload"] == 1 and c["upload_bytes"] == 48
    assert c["sync"] == 2  # int(...) and the boolean mask's size
    assert c["op"] >= 5


def test_a_regrid_on_the_stand_in_keeps_its_uploads_and_read_backs_batched(counting_cupy):
    from tests.unit.test_amr3d_regrid_device import vortex

    p = vortex(physics={"precision": "fp32"})
    runs = count.count_regrids(counting_cupy, p, 10.0, regrids=2, say=lambda *a: None)
    parts, seconds, _ = runs[-1]
    assert set(seconds) >= {"criterion", "coupling_host", "transfer", "synchronise", "select"}
    assert parts["select"]["upload"] <= 2  # the stepper's tables: one upload (+ the levels' first ids)
    assert parts["coupling_host"]["upload"] <= 2  # every level's inputs, then the groups' tables
    assert parts["criterion"]["sync"] == 1  # the per-leaf maxima of every level at once
    # the coupling's read-backs do not grow with the levels: one per kind and per distinct set,
    # the groups present, one for every level's arrays
    assert parts["coupling_host"]["sync"] <= 16
    assert sum(c["upload"] for c in parts.values()) <= 20

"""tools/amr3d_regrid_count.py: a regrid on the counting stand-in for CuPy runs the engine's CuPy
path without a host array in a device operation (CuPy would raise), and its uploads and
read-backs stay batched: the stepper's tables one upload, the coupling's levels one set of passes."""
from __future__ import annotations

import importlib.util
import math
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


def _between(events, after: str):
    """The laps from the lap ``after`` up to the first wait for the device after it, and that wait's site."""
    i = events.index(("lap", after))
    laps = []
    for kind, what in events[i + 1:]:
        if kind == "sync":
            return laps, what
        laps.append(what)
    return laps, None


def test_a_regrid_queues_the_populations_before_the_coupling_without_waiting(counting_cupy):
    """By default nothing waits for the device between the transfer, the synchronisation (queued
    before the coupling: their restriction is known from the fix-up points) and the coupling's host
    work: the first wait after the plan is a read-back of the coupling's passes. With the serial
    clock (a profile) every lap waits; the counts of launches and uploads are the same either way.
    (The second regrid of each: the first uploads the constant tables, each followed by a wait.)"""
    from tests.unit.test_amr3d_regrid_device import vortex

    p = vortex(physics={"precision": "fp32"})
    parts, _, _ = count.count_regrids(counting_cupy, p, 10.0, regrids=2, say=lambda *a: None)[-1]
    events = list(count.COUNTS.events)
    laps, site = _between(events, "plan")
    assert laps == ["transfer", "other", "coupling_host", "synchronise"], laps
    assert site.startswith("amr3d/group_desc.py"), site
    waits = sum(c["stream_sync"] + c["device_sync"] for c in parts.values())
    assert waits == 2  # the steps before the regrid, and the regrid's end ("drain")
    assert parts["drain"]["stream_sync"] == 1
    for part in ("transfer", "synchronise", "other", "select"):
        assert parts[part]["sync"] == 0, part

    serial, _, _ = count.count_regrids(counting_cupy, p, 10.0, regrids=2, say=lambda *a: None, serial=True)[-1]
    laps, _ = _between(list(count.COUNTS.events), "plan")
    assert laps == []  # (the transfer's lap waits first)
    assert sum(c["stream_sync"] for c in serial.values()) == waits + 8  # one a lap (8 before the drain's)
    for kind in ("op", "upload", "sync", "kernel"):
        assert sum(c[kind] for c in serial.values()) == sum(c[kind] for c in parts.values()), kind


def test_the_coupling_tables_stay_on_the_device(counting_cupy):
    """The coupling's tables built on the device (descriptors, fine and coarse points, the distinct
    stencils: ~20 MB at the GPU size) are not read back by a regrid: the stepper takes the device
    copies, their shapes, and its index width from the descriptors' bounds read back with the counts.
    Each host copy is read at its first use, of the shape given before, the descriptors within those
    bounds (the values: the host build's, tests/unit/test_amr3d_group_desc.py's device branch)."""
    from nagare.engine.amr3d import interface, tree_shape

    from tests.unit.test_amr3d_regrid_device import vortex

    p = vortex(physics={"precision": "fp32"})
    parts, _, _ = count.count_regrids(counting_cupy, p, 10.0, regrids=1, say=lambda *a: None)[-1]
    (coupling,) = tree_shape._COUPLING_CACHE.values()
    shapes = {lv: {k: c.shape_of(k) for k in interface.LAZY_ARRAYS} for lv, c in coupling.items()}
    tables = sum(8 * math.prod(s) for by in shapes.values() for s in by.values())
    assert tables > 500_000
    # the counts and bounds, the groups present, the criterion's per-leaf maxima: not the tables
    assert sum(c["download_bytes"] for c in parts.values()) < tables // 16
    for lv, c in coupling.items():
        assert set(c.held_on_device()) == set(interface.LAZY_ARRAYS)
        bounds = c.desc_bounds()
        d = c.desc  # read back now
        assert type(d) is np.ndarray and d.shape == shapes[lv]["desc"] == (27, c.n_fix)
        assert bounds == (min(int(d.min(initial=0)), 0), max(int(d.max(initial=0)), 0))
        for k in interface.LAZY_ARRAYS:
            assert type(getattr(c, k)) is np.ndarray and getattr(c, k).shape == shapes[lv][k]
        assert c.held_on_device() == ()

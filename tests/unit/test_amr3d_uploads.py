"""engine/amr3d/uploads.py: many host tables as one upload (each a view of one device buffer, the
values, dtypes and shapes of its own asarray), and the device's constant tables (uploaded once);
the regrid's stepper rebuild takes the descriptors built on the device as they are there."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d import uploads


def _tables():
    rng = np.random.default_rng(3)
    return [rng.integers(-9, 9, (27, 13)).astype(np.int64), np.zeros(0, np.int64), rng.random((5, 8)),
            rng.random(7).astype(np.float32), np.arange(11, dtype=np.int32), np.zeros((0, 27), np.float32),
            np.array([True, False, True]), rng.integers(0, 5, (4, 27)).astype(np.int32)[:, ::2]]


def test_upload_together_gives_each_tables_values_dtype_and_shape(emulated_cupy):
    host = _tables()
    dev = uploads.upload_together(emulated_cupy, host)
    assert len(dev) == len(host)
    roots = []
    for h, d in zip(host, dev):
        assert d.dtype == h.dtype and d.shape == h.shape and d.flags.c_contiguous
        np.testing.assert_array_equal(d, h)
        if d.size:
            root = d
            while root.base is not None:
                root = root.base
            roots.append(root)
            offset = d.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            assert offset % uploads.ALIGN == 0
    assert all(r is roots[0] for r in roots)  # views of one buffer: one upload


def test_upload_together_on_numpy_is_the_arrays():
    host = _tables()
    for h, d in zip(host, uploads.upload_together(np, host)):
        assert d.dtype == h.dtype and d.flags.c_contiguous
        np.testing.assert_array_equal(d, h)


def test_a_constant_is_uploaded_once_and_read_only():
    made = []

    def make():
        made.append(1)
        return np.arange(6).reshape(2, 3)

    a = uploads.constant(np, ("test constant", 6), make)
    b = uploads.constant(np, ("test constant", 6), make)
    assert a is b and len(made) == 1
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError):
        a[0, 0] = 1


def _check_stepper_tables(e, asnumpy):
    st = e.shape.stepper
    for lv, c in st.coupling.items():
        assert c.device is None  # taken by the stepper, then dropped
        d = st.kernels.dev[lv]
        # (the dense interpolation rows only for the split launches: the fused coupling's compact rows
        # are built from them, then they go; CupyKernels.split_tables brings them back)
        assert "interp_slot" not in d and "interp_w" not in d
    st.kernels.split_tables(st)
    for lv, c in st.coupling.items():
        d = st.kernels.dev[lv]
        idx = np.int64 if d["fixup"] == "fixup64" else np.int32
        for k, dtype in (("desc", idx), ("fix_pts", idx), ("fine_pts", np.int64), ("coarse_pts", np.int64),
                         ("interp_slot", np.int64), ("interp_w", np.float32), ("restrict_dst", np.int64),
                         ("restrict_src", np.int64)):
            assert d[k].dtype == dtype and d[k].flags.c_contiguous, (lv, k)
            np.testing.assert_array_equal(asnumpy(d[k]), np.asarray(getattr(c, k), dtype), err_msg=f"level {lv} {k}")
        if c.n_fix:
            want = np.full(c.n * e.forest.m ** 3, -1, np.int32)
            want[c.fix_pts] = np.arange(c.n_fix)
            np.testing.assert_array_equal(asnumpy(d["fix_of"]), want)


def test_a_device_build_keeps_its_arrays_there(emulated_cupy):
    """interface.build on a device keeps each level's device-built arrays (LevelCoupling.device),
    equal to the host fields; a build on the host has none."""
    from nagare.engine.amr3d import interface
    from nagare.engine.amr3d.tree import Forest, refine

    f = refine(Forest.uniform((2, 2, 1), 0, 5, 2, (True, True, True)), [0])
    f = refine(f, [f.n_leaves - 1])
    for lv, c in interface.build(f, "quadratic", xp=emulated_cupy).items():
        assert c.device is not None
        for k in ("desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w"):
            np.testing.assert_array_equal(c.device[k], getattr(c, k), err_msg=f"level {lv} {k}")
    assert all(c.device is None for c in interface.build(f.replace(f.level, f.block), "quadratic").values())


def test_the_stepper_takes_the_device_built_descriptors(emulated_cupy):
    """A CuPy engine's stepper takes the coupling's device-built arrays (then drops them from the
    coupling): its tables are the host fields' values in the kernels' dtypes."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend

    from tests.unit.test_amr3d_regrid_device import shifted, vortex

    e = AMR3D(vortex(physics={"precision": "fp32"}), Backend("cupy", emulated_cupy, _cupy=emulated_cupy),
              variants={"kernels": "naive-fused"})
    e.shape.set_leaves(shifted(e, 10.0))
    e.regrid()
    _check_stepper_tables(e, np.asarray)


@pytest.mark.gpu
def test_the_stepper_takes_the_device_built_descriptors_on_the_gpu():
    """The same on CuPy, the shipped vortex at its GPU size after a regrid (the stepper's tables are
    views of one upload, or the device-built arrays in the kernels' dtypes)."""
    import cupy  # (gpu test)
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset  # (the shipped preset, GPU sizes)

    from tests.unit.test_amr3d_regrid_device import shifted

    p = load_preset("amr3d-vortex-adapt", backend="cupy")
    e = AMR3D(p, get_backend("cupy"), variants={"kernels": "naive-fused"})
    e.shape.set_leaves(shifted(e, 12.0).astype(np.float32))
    assert e.regrid()["refined"] > 0
    _check_stepper_tables(e, cupy.asnumpy)
    host = [np.arange(5, dtype=np.int64), np.zeros(0, np.float32), np.ones((3, 27), np.float32)]
    for h, d in zip(host, uploads.upload_together(cupy, host)):
        assert isinstance(d, cupy.ndarray) and d.dtype == h.dtype and d.shape == h.shape and d.flags.c_contiguous
        np.testing.assert_array_equal(cupy.asnumpy(d), h)

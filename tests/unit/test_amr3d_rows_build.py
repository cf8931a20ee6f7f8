"""The compact interpolation rows' build (interp_rows.build; on a GPU tree_stepper.CupyKernels._build_rows,
coupling.cu amr3d_rows_need + amr3d_rows_build): the array code gives the rows a per-row loop spells
out; the CUDA build (emulated with g++ here, the real GPU in the gpu-marked tests) gives the array
code's arrays bit for bit, on the registry's trees and on a regrid's device-built coupling; the CUDA
stepper keeps the dense rows only while the split launches are asked for."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import d3q27, interface, interp_rows
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import Backend, get_backend

from tests.unit.test_amr3d_regrid_device import shifted, vortex
from tests.unit.test_amr3d_tree_stepper import three_levels

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
PRESETS = AMR3D.equivalence_presets()
LABELS = ["fp32-tree2-m9", "fp32-tree3-m9", "fp32-sphere-m9"]


def loop_rows(slot, w, desc, n_fine: int):
    """The compact rows as interp_rows.build documents them, row by row on the host."""
    U, S = slot.shape
    count = np.zeros(U, np.int32)
    cslot, cw = np.zeros((U, S), np.int32), np.zeros((U, S), np.float32)
    for u in range(U):
        order = [s for s in range(S) if w[u, s] != 0] + [s for s in range(S) if not w[u, s] != 0]
        count[u] = sum(1 for s in range(S) if w[u, s] != 0)
        cslot[u], cw[u] = slot[u, order], w[u, order]
    mask = np.zeros(U, np.uint32)
    for d in np.asarray(desc).reshape(-1):
        j = -1 - int(d) - d3q27.Q * n_fine
        if d < 0 and 0 <= j < d3q27.Q * U:
            mask[j % U] |= np.uint32(1 << (j // U))
    return count, cslot, cw, mask


def assert_rows_equal(got: interp_rows.InterpRows, want: interp_rows.InterpRows, asnumpy=np.asarray):
    for name in ("count", "slot", "w", "mask"):
        a, b = asnumpy(getattr(got, name)), asnumpy(getattr(want, name))
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def host_rows(c) -> interp_rows.InterpRows:
    """The array code's rows from the coupling's host fields, as the CUDA stepper takes them (int64
    slots, float32 weights)."""
    return interp_rows.build(np, np.asarray(c.interp_slot, np.int64), np.asarray(c.interp_w, np.float32), c.desc,
                             c.size_of("fine_pts"))


@pytest.mark.parametrize("interp", ["quadratic", "linear"])
def test_the_array_build_gives_the_rows_a_loop_spells_out(interp):
    for c in interface.build(three_levels(), interp).values():
        if not c.coarse_pts.size:
            continue
        w = c.interp_w.astype(np.float32)
        w[::5, 0] = -0.0  # a negative zero counts as a zero weight (behind, its bits kept)
        rows = interp_rows.build(np, c.interp_slot, w, c.desc, c.fine_pts.size)
        count, cslot, cw, mask = loop_rows(c.interp_slot, w, c.desc, c.fine_pts.size)
        np.testing.assert_array_equal(rows.count, count)
        np.testing.assert_array_equal(rows.slot, cslot)
        np.testing.assert_array_equal(rows.w.view(np.uint32), cw.view(np.uint32))
        np.testing.assert_array_equal(rows.mask, mask)
        assert rows.count.dtype == np.int32 and rows.slot.dtype == np.int32 and rows.mask.dtype == np.uint32


def emulated(cp, label: str, storage_kind: str = "native") -> AMR3D:
    e = AMR3D(PRESETS[label], Backend("cupy", cp, _cupy=cp),
              variants={"kernels": "naive-fused", "storage": storage_kind})
    e._roofline = 1e12  # (no copy bandwidth to measure)
    e.random_state(np.random.default_rng(5))
    return e


@needs_gxx
@pytest.mark.parametrize("label", LABELS)
def test_the_cuda_build_gives_the_array_codes_rows(emulated_cupy, label):
    e = emulated(emulated_cupy, label)
    st = e.shape.stepper
    built = 0
    for lv, c in st.coupling.items():
        d = st.kernels.dev[lv]
        if not c.size_of("coarse_pts"):
            assert "rows" not in d
            continue
        assert_rows_equal(d["rows"], host_rows(c))
        built += 1
    assert built >= 1


def check_rows_after_a_regrid(backend, to_host=np.asarray) -> None:
    """After a regrid that refines, every level's compact rows as built on the device (its dense rows
    handed over, not uploaded) equal the array code's from the host tables."""
    e = AMR3D(vortex(physics={"precision": "fp32"}), backend, variants={"kernels": "naive-fused"})
    e.shape.set_leaves(shifted(e, 10.0))
    assert e.regrid()["refined"] > 0
    st = e.shape.stepper
    levels = [lv for lv, c in st.coupling.items() if c.size_of("coarse_pts")]
    assert levels
    for lv in levels:
        assert_rows_equal(st.kernels.dev[lv]["rows"], host_rows(st.coupling[lv]), to_host)


@needs_gxx
def test_the_cuda_build_after_a_regrid_gives_the_array_codes_rows(emulated_cupy):
    check_rows_after_a_regrid(Backend("cupy", emulated_cupy, _cupy=emulated_cupy))


@needs_gxx
def test_the_dense_rows_stay_on_the_device_only_for_the_split_launches(emulated_cupy):
    e = emulated(emulated_cupy, "fp32-tree3-m9")
    st = e.shape.stepper
    assert all("interp_slot" not in d and "interp_w" not in d for d in st.kernels.dev.values())
    st.fused_coupling = False
    for lv, c in st.coupling.items():
        d = st.kernels.dev[lv]
        np.testing.assert_array_equal(d["interp_slot"], np.asarray(c.interp_slot, np.int64))
        np.testing.assert_array_equal(d["interp_w"], np.asarray(c.interp_w, np.float32))
        assert d["interp_slot"].dtype == np.int64 and d["interp_w"].dtype == np.float32


@needs_gxx
def test_the_build_refuses_counts_past_its_32_bit_indices(emulated_cupy, monkeypatch):
    e = emulated(emulated_cupy, "fp32-tree2-m9")
    st = e.shape.stepper
    lv, c = next((lv, c) for lv, c in st.coupling.items() if c.size_of("coarse_pts"))
    d = {"interp_slot": np.asarray(c.interp_slot, np.int64), "interp_w": np.asarray(c.interp_w, np.float32),
         "desc": np.asarray(c.desc, np.int32)}
    monkeypatch.setattr(type(c), "size_of", lambda self, name: 2**31 if name == "coarse_pts" else 0)
    with pytest.raises(ValueError, match="32-bit"):
        st.kernels._build_rows(emulated_cupy, d, c)


# ---- the real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("storage_kind", ["native", "fp16"])
@pytest.mark.parametrize("label", LABELS)
def test_gpu_build_gives_the_array_codes_rows(label, storage_kind):
    """On the GPU: CupyKernels' rows = interp_rows.build's (CuPy array code on the same device
    tables, and NumPy on the host fields), bit for bit."""
    import cupy as cp

    e = AMR3D(PRESETS[label], get_backend("cupy"), variants={"kernels": "naive-fused", "storage": storage_kind})
    e.random_state(np.random.default_rng(5))
    st = e.shape.stepper
    for lv, c in st.coupling.items():
        if not c.size_of("coarse_pts"):
            continue
        got = st.kernels.dev[lv]["rows"]
        assert_rows_equal(got, host_rows(c), cp.asnumpy)
        on_device = interp_rows.build(cp, cp.asarray(np.asarray(c.interp_slot, np.int64)),
                                      cp.asarray(np.asarray(c.interp_w, np.float32)), st.kernels.dev[lv]["desc"],
                                      c.size_of("fine_pts"))
        assert_rows_equal(got, on_device, cp.asnumpy)


@pytest.mark.gpu
def test_gpu_build_after_a_regrid_gives_the_array_codes_rows():
    import cupy as cp

    check_rows_after_a_regrid(get_backend("cupy"), cp.asnumpy)


@pytest.mark.gpu
def test_sanitizer_case() -> None:
    """The small run tools/gpu-check.sh's regrid2 stage puts under compute-sanitizer: a regrid of the
    vortex test tree on the GPU (the rows built by the new kernels), then a few steps that read them."""
    e = AMR3D(vortex(physics={"precision": "fp32"}), get_backend("cupy"), variants={"kernels": "naive-fused"})
    e.shape.set_leaves(shifted(e, 10.0))
    e.regrid()
    e.step(2)
    e.backend.synchronize(e.stream)
    assert np.isfinite(e.backend.asnumpy(e.state_arrays()["f"])).all()


@pytest.mark.parametrize("label", LABELS)
def test_the_memory_estimate_bounds_the_fused_couplings_buffers(label):
    """tree_shape.FUSED_COUPLING_BYTES a shell point bounds what the fused coupling adds on a GPU:
    the θ = ½ buffers and the compact rows, as a stepper allocates them (NumpyKernels: the same shapes)."""
    from nagare.engine.amr3d.tree_shape import FUSED_COUPLING_BYTES
    from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
    from nagare.engine.timing import PhaseTimer

    e = AMR3D(PRESETS[label], get_backend("numpy"))
    st = TreeStepper(np, e.forest, e.shape.interface(), 0.6, (0.0, 0.0, 0.0), NumpyKernels(),
                     PhaseTimer(get_backend("numpy")), dtype=np.float32)
    used = sum(b.nbytes for b in (*st.coarse_half.values(), *st.interp_half.values()))
    used += sum(st.kernels.dev[lv]["rows"].nbytes() for lv in st.coupling)
    m = e.forest.m
    shell = e.forest.n_leaves * (m**3 - (m - 2) ** 3)
    assert 0 < used <= shell * FUSED_COUPLING_BYTES

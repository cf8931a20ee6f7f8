"""Domain decomposition on CUDA (all gpu-marked; skipped without a usable device).

- One device: N sub-domains through SameDeviceTransport (halo copies on the device, overlap's side
  stream and events) give the undecomposed run's state bit for bit, for every decomposed kernel.
- Several devices: the same through NcclTransport on 2 and 4 GPUs (one process, one stream per
  GPU); skipped with the reason on a machine with fewer GPUs (where they last ran: docs/decisions.md D28).
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend

from tests.unit.test_decomp import LBM_CASES, diffusion, lbm, wave

pytestmark = pytest.mark.gpu


def _state(e):
    return {k: np.array(e.backend.asnumpy(v), copy=True) for k, v in e.state_arrays().items()}


def _check(preset, variants, steps=9, parts=(1, 2, 3, 4), transport="same-device", overlaps=("off", "on")):
    from nagare.engine.families import create_engine

    gpu = get_backend("cupy")
    ref = create_engine(preset, gpu, variants=variants)
    ref.step(steps)
    want = _state(ref)
    for n in parts:
        for overlap in overlaps:
            e = create_engine(preset, gpu, variants=variants, parts=n, overlap=overlap, transport=transport)
            e.step(steps - 4)
            e.step(4)
            got = _state(e)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{variants} N={n} {overlap} {transport} {k}")


@pytest.mark.parametrize("bc", ["periodic", "fixed"])
@pytest.mark.parametrize("kernel", ["array", "stencil-host", "cuda", "cuda-autotune", "cuda-vec", "cuda-handwritten"])
def test_diffusion3d_on_one_device(kernel, bc):
    from nagare.engine.diffusion3d import Preset

    p = Preset.model_validate({**diffusion(bc).model_dump(), "grid": {"nx": 16, "ny": 7, "nz": 13}})
    _check(p, {"kernel": kernel})


@pytest.mark.parametrize("bc", ["periodic", "fixed"])
@pytest.mark.parametrize("kernel", ["stencil-host", "cuda", "cuda-autotune"])
def test_wave2d_on_one_device(kernel, bc):
    _check(wave(bc), {"kernel": kernel})


LBM_GPU = [("fused", "native", "two-lattice"), ("fused", "fp16", "two-lattice"), ("fused", "native", "aa"),
           ("fused", "fp16", "aa"), ("two-kernel", "native", "two-lattice"), ("reference", "native", "two-lattice")]


@pytest.mark.parametrize("case", list(LBM_CASES))
@pytest.mark.parametrize("kernel,storage,streaming", LBM_GPU)
def test_lbm2d_on_one_device(case, kernel, storage, streaming):
    p = lbm(case)
    if streaming == "aa" and p.open_boundaries:
        pytest.skip("AA streaming does not implement inlet/outlet boundaries")
    _check(p, {"kernel": kernel, "storage": storage, "streaming": streaming})


def _gpus(n):
    from nagare.engine.decomp import nccl_unavailable

    reason = nccl_unavailable(get_backend("cupy"), n)
    if reason:
        pytest.skip(f"NCCL on {n} GPUs: {reason}")


@pytest.mark.parametrize("n", [2, 4])
def test_nccl_matches_undecomposed(n):
    """NcclTransport (packed and in-place regions, AA fix-ups by direction lists) equals the
    undecomposed run bit for bit, overlap off and on."""
    _gpus(n)
    _check(diffusion("periodic"), {"kernel": "cuda"}, parts=(n,), transport="nccl")
    _check(wave("fixed"), {"kernel": "cuda"}, parts=(n,), transport="nccl")
    _check(wave("periodic"), {"kernel": "cuda"}, parts=(n,), transport="nccl")  # 2D pads, bound NCCL calls
    for streaming in ("two-lattice", "aa"):
        _check(lbm("walls-lid"), {"kernel": "fused", "storage": "native", "streaming": streaming}, parts=(n,),
               transport="nccl")
    _check(lbm("inlet-outlet"), {"kernel": "fused", "storage": "fp16", "streaming": "two-lattice"}, parts=(n,),
           transport="nccl")
    # the packed buffers with overlap on, through lbm2d's reference step split into edge and interior
    # rows (the CUDA steppers above split theirs by row-range launches, lbm2d.cu's ROWS instances)
    _check(lbm("walls-lid"), {"kernel": "reference", "storage": "native", "streaming": "two-lattice"}, parts=(n,),
           transport="nccl")


@pytest.mark.parametrize("n", [2, 4])
def test_nccl_checkpoint_resumes_on_another_count(n, tmp_path):
    from nagare.engine.checkpoint import load_checkpoint, save_checkpoint
    from nagare.engine.families import create_engine
    from nagare.engine.lbm2d import Engine

    _gpus(n)
    gpu = get_backend("cupy")
    p = lbm("obstacle-force")
    ref = Engine(p, gpu, variants={"kernel": "fused"})
    ref.step(9)
    a = create_engine(p, gpu, variants={"kernel": "fused"}, parts=n, transport="nccl")
    a.step(4)
    save_checkpoint(a.checkpoint(), tmp_path / "c.npz")
    b = create_engine(p, gpu, variants={"kernel": "fused"}, parts=3, transport="same-device")
    b.restore(load_checkpoint(tmp_path / "c.npz"))
    b.step(5)
    np.testing.assert_array_equal(_state(b)["f"], _state(ref)["f"])


@pytest.mark.parametrize("n", [2])
def test_nccl_reports_each_gpus_own_time(n):
    """Each GPU's update time is a detail phase gpu<device> (sampled on the last step of a batch), shown beside the
    step's phases and not added to the step (docs/multi-gpu.md §1)."""
    from nagare.engine.families import create_engine

    _gpus(n)
    gpu = get_backend("cupy")
    for overlap in ("off", "on"):
        e = create_engine(diffusion("periodic"), gpu, variants={"kernel": "cuda"}, parts=n, transport="nccl",
                          overlap=overlap)
        for _ in range(3):
            e.step(4)
        e.synchronize()
        rep = e.batch_report(wait=True)
        names = [f"gpu{d}" for d in range(n)]
        for name in names:
            assert rep.phase_ms_per_step.get(name, 0.0) > 0.0, (overlap, rep.phase_ms_per_step)
        summed = sum(v for k, v in rep.phase_ms_per_step.items() if k not in names)
        np.testing.assert_allclose(rep.ms_per_step, summed, rtol=1e-12)

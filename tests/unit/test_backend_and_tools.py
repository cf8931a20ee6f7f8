"""Backends, device info, timers, shader loader, colormaps, atomic writes."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from nagare.app import colormaps
from nagare.app.atomic import ExportError, write_text_atomic
from nagare.engine import backend as backend_mod
from nagare.engine.backend import device_info, get_backend
from nagare.engine.device import copy_bandwidth
from nagare.engine.errors import BackendUnavailable
from nagare.engine.timing import PhaseSample, PhaseTimer, summarise

from nagare import shaders


def test_unknown_backend_is_refused():
    with pytest.raises(BackendUnavailable, match="unknown backend 'opencl'"):
        get_backend("opencl")


def test_auto_falls_back_to_numpy_with_one_reason(monkeypatch, caplog):
    monkeypatch.setattr(backend_mod, "_cupy_or_reason", lambda: (None, "no CUDA device found"))
    monkeypatch.setattr(backend_mod, "_cache", {})
    be = get_backend("auto")
    assert be.name == "numpy" and be.reason == "no CUDA device found"
    assert caplog.text.count("using the NumPy backend because no CUDA device found") == 1
    with pytest.raises(BackendUnavailable, match="backend 'cupy' is not available: no CUDA device found"):
        get_backend("cupy")


def test_numpy_device_info_and_cached_bandwidth(tmp_path, monkeypatch):
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path))
    be = get_backend("numpy")
    assert "CPU" in device_info(be).name
    t0 = time.perf_counter()
    bw = copy_bandwidth(be)
    first = time.perf_counter() - t0
    assert bw > 1e8  # any machine copies faster than 100 MB/s
    assert (tmp_path / "bandwidth.json").exists()
    t0 = time.perf_counter()
    assert copy_bandwidth(be) == bw  # cached: the same number, no new measurement
    assert time.perf_counter() - t0 < first


@pytest.mark.gpu
def test_cupy_bandwidth_is_a_plain_copy_within_10_percent(tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path))
    bw = copy_bandwidth(get_backend("cupy"))
    a = cp.arange(1 << 28, dtype=cp.float32)
    b = cp.empty_like(a)
    s, e = cp.cuda.Event(), cp.cuda.Event()
    b[...] = a
    times = []
    for _ in range(10):
        s.record()
        b[...] = a
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    plain = 2 * a.nbytes / (np.median(times) * 1e-3)
    np.testing.assert_allclose(bw, plain, rtol=0.10)


def test_numpy_timer_and_summary():
    t = PhaseTimer(get_backend("numpy"))
    with t.phase("a", steps=4):
        time.sleep(0.002)
    with t.phase("b", steps=4):
        pass
    samples = t.collect()
    assert [s.phase for s in samples] == ["a", "b"] and samples[0].ms >= 2.0
    rep = summarise([PhaseSample("a", 8.0, 4), PhaseSample("b", 4.0, 4), PhaseSample("a", 2.0, 1)],
                    updates_per_step=1000, bytes_per_update=8, roofline_bytes_per_s=1e9)
    np.testing.assert_allclose(rep.phase_ms_per_step["a"], 2.0)
    np.testing.assert_allclose(rep.phase_ms_per_step["b"], 1.0)
    np.testing.assert_allclose(rep.updates_per_s, 1000 / 3e-3)
    np.testing.assert_allclose(rep.roofline_fraction, 1000 / 3e-3 * 8 / 1e9)


def test_detail_phases_are_shown_but_not_added_to_the_step():
    """Per-GPU times of a decomposed step (engine/decomp/common.GpuTimes) break the step down: they
    are reported per phase but the step's time and the throughput come from the other phases."""
    t = PhaseTimer(get_backend("numpy"))
    token = t.begin("gpu1", detail=True)
    with t.phase("step", steps=2):
        pass
    t.end(token, steps=1)
    samples = t.collect()
    assert [(s.phase, s.detail, s.steps) for s in samples] == [("step", False, 2), ("gpu1", True, 1)]
    rep = summarise([PhaseSample("step", 6.0, 2), PhaseSample("exchange", 1.0, 2),
                     PhaseSample("gpu0", 2.5, 1, detail=True), PhaseSample("gpu1", 2.0, 1, detail=True)],
                    updates_per_step=1000, bytes_per_update=8, roofline_bytes_per_s=None)
    np.testing.assert_allclose(rep.phase_ms_per_step["gpu0"], 2.5)
    np.testing.assert_allclose(rep.ms_per_step, 3.5)  # 3.0 + 0.5, the GPUs' times not added
    np.testing.assert_allclose(rep.updates_per_s, 1000 / 3.5e-3)
    assert rep.steps == 2


def test_shader_loader_inlines_includes():
    src = shaders.source("cuda/diffusion3d/diffusion7.cu")
    assert "diffusion7_point" in src and '#include "diffusion7.cuh"' not in src
    assert "cuda/diffusion3d/diffusion7.cu" in shaders.listing("cuda")
    with pytest.raises(FileNotFoundError):
        shaders.path("../engine/contract.py")


def test_colormaps():
    for name in colormaps.NAMES:
        lut = colormaps.lut(name)
        assert lut.shape == (256, 3) and 0 <= lut.min() and lut.max() <= 1
    img = colormaps.apply(np.array([[0.0, 1.0]]), "gray", (0, 1))
    np.testing.assert_array_equal(img[0, 0], [0, 0, 0])
    np.testing.assert_array_equal(img[0, 1], [255, 255, 255])
    with pytest.raises(KeyError, match="unknown colormap"):
        colormaps.lut("rainbow")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only folders")
def test_atomic_write_into_read_only_folder_is_one_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(ExportError, match="cannot write"):
        write_text_atomic(ro / "x.txt", "hi")


def test_atomic_write_failure_keeps_old_file(tmp_path):
    target = tmp_path / "x.txt"
    write_text_atomic(target, "old")

    def broken(p):
        p.write_text("half")
        raise OSError(28, "No space left on device")

    from nagare.app.atomic import write_atomic
    with pytest.raises(ExportError, match="No space left on device"):
        write_atomic(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_atomic_write_interrupted_keeps_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "x.txt"
    write_text_atomic(target, "old")

    def interrupted(p):
        p.write_text("half")
        raise KeyboardInterrupt

    from nagare.app.atomic import write_atomic
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, interrupted)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_two_writes_of_one_file_in_one_process_use_different_temporaries(tmp_path):
    """Threads of one process writing the same file (the tuner's cache) each get their own temporary:
    with one name per process a rename took another thread's half-written file away (CI, flaky)."""
    from nagare.engine.atomic import _TMP, temp_path

    a, b = temp_path(tmp_path / "c.json"), temp_path(tmp_path / "c.json")
    assert a != b
    for t in (a, b, temp_path(tmp_path / "v.mp4", ".mp4")):
        m = _TMP.match(t.name)
        assert m is not None and int(m["pid"]) == os.getpid(), t.name


def test_kernel_sass_reports_registers_and_opcodes(capsys):
    """tools/kernel_sass.py on the fp16 pipe kernel, where nvcc and cuobjdump exist (not in CI)."""
    import importlib.util
    import os
    import shutil
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "kernel_sass.py"
    spec = importlib.util.spec_from_file_location("kernel_sass", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nvcc = os.environ.get("NAGARE_NVCC") or shutil.which("nvcc")
    try:
        mod.find_tool("cuobjdump"), mod.find_tool("nvdisasm")
    except SystemExit:
        nvcc = None
    if not nvcc:
        pytest.skip("no nvcc / cuobjdump / nvdisasm on this machine")
    sig = ("lbm_fused_pipe<false, 2, unsigned int, false>(const unsigned short*, unsigned short*, "
           "const unsigned char*, const unsigned char*, const unsigned char*, int, int, float, float, float, float, "
           "float, float, int, int, int)")
    assert mod.main(["cuda/lbm2d/lbm2d.cu", sig, "--opt=--prec-div=false"]) == 0
    out = capsys.readouterr().out
    assert "lbm_fused_pipe" in out and "registers" in out and "LDGSTS:" in out and "STG:9" in out

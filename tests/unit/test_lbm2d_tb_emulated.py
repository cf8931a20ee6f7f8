"""The temporal-blocking CUDA kernels, compiled for the host with a tiny CUDA emulator.

tests/cuda_emu/emu.h runs each CUDA thread as a fiber, __syncthreads as a barrier over the block's
fibers and __shfl_{up,down}_sync through a per-warp exchange slot, and NaN-poisons shared memory before every
block. That checks the kernels' indexing, halos, periodic wrap, shrinking regions, register cones,
shuffles and discarded warp-edge lanes on any machine with a C++20 compiler — the GPU tests in
test_lbm2d_tb.py check the same on real hardware. On x86 without FMA contraction the host build
does the same float operations in the same order as the NumPy model, so we ask for bit equality.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.lbm2d import temporal_blocking as tb

from nagare import shaders

from .test_lbm2d_tb import model_step, model_step_fp16, scene

EMU = Path(__file__).resolve().parents[1] / "cuda_emu"
CXX = shutil.which("g++") or shutil.which("clang++")


def _build(tmp: Path, S: str, T: str, ts: int, tr: int, tx: int, ty: int, ws: bool, wave: bool = False) -> Path:
    source = "cuda/lbm2d/wavefront.cu" if wave else "cuda/lbm2d/temporal_blocking.cu"
    (tmp / "kernel_src.cu").write_text(shaders.source(source))
    exe = tmp / "emu"
    defs = [f"-DEMU_S={S}", f"-DEMU_T={T}", f"-DEMU_TS={ts}", f"-DEMU_TR={tr}", f"-DEMU_TX={tx}", f"-DEMU_TY={ty}",
            f"-DEMU_WS={'true' if ws else 'false'}"] + (["-DEMU_WAVE"] if wave else [])
    cmd = [CXX, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", *defs, f"-I{tmp}",
           str(EMU / "main.cpp"), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        if "barrier" in res.stderr and "No such file" in res.stderr:
            pytest.skip("the host C++ compiler has no C++20 <barrier>")
        raise AssertionError(res.stderr[-3000:])
    return exe


def run_emulated(tmp_path, kernel, ts, tr, tile, dtype, nx, ny, nsteps):
    if CXX is None:
        pytest.skip("no host C++ compiler (g++/clang++) for the CUDA emulator")
    tx, ty = (int(v) for v in tile.split("x"))
    S, T = {np.float32: ("float", "float"), np.float64: ("double", "double"), np.float16: ("tb_half", "float")}[dtype]
    exe = _build(tmp_path, S, T, ts, 1 if kernel in ("stb", "wavefront") else tr, tx, ty, kernel == "srtb-ws",
                 wave=kernel == "wavefront")
    f, mask, p = scene(nx, ny, np.dtype(np.float32 if dtype == np.float16 else dtype))
    f = f.astype(dtype)
    f.tofile(tmp_path / "in.bin")
    tb.node_codes(np, mask).tofile(tmp_path / "code.bin")
    subprocess.run([str(exe), str(nx), str(ny), str(nsteps), str(tmp_path / "in.bin"), str(tmp_path / "code.bin"),
                    str(tmp_path / "out.bin"), repr(p["tau"]), *map(repr, p["force"]), *map(repr, p["u_wall"])],
                   check=True, timeout=300)
    got = np.fromfile(tmp_path / "out.bin", dtype).reshape(f.shape)
    want = f
    one = model_step_fp16 if dtype == np.float16 else model_step
    for _ in range(nsteps):
        want = one(want, mask, p["tau"], p["force"], p["u_wall"])
    return got, want


# wavefront tiles are (threads = strip width incl. the 2 ts halo columns) x (rows per block); the
# cases cover strips that do not divide nx (the last strip wraps), runs that do not divide ny, a last
# launch of fewer steps than ts (67 = 16 x 4 + 3), a domain narrower than one strip, and fp16 storage.
FAST = [
    ("stb", 4, 0, "32x8", np.float32, 77, 53, 67),
    ("wavefront", 4, 0, "32x16", np.float32, 77, 53, 67),
    ("wavefront", 2, 0, "64x7", np.float16, 45, 37, 67),
    ("srtb", 3, 3, "32x8", np.float32, 45, 37, 67),
    ("srtb-ws", 4, 4, "8x8", np.float32, 40, 37, 9),
    ("srtb", 4, 2, "32x8", np.float16, 45, 37, 67),
]
SLOW = [
    ("wavefront", 1, 0, "8x5", np.float32, 45, 37, 67),
    ("wavefront", 8, 0, "32x64", np.float64, 45, 37, 67),
    ("wavefront", 3, 0, "128x9", np.float32, 77, 53, 20),
    ("stb", 1, 0, "32x8", np.float32, 77, 53, 67),
    ("stb", 8, 0, "16x4", np.float32, 77, 53, 67),
    ("stb", 4, 0, "10x10", np.float64, 45, 37, 67),
    ("srtb", 4, 2, "10x10", np.float32, 45, 37, 67),
    ("srtb", 8, 2, "8x8", np.float64, 45, 37, 67),
    ("srtb-ws", 4, 2, "32x8", np.float32, 77, 53, 9),
    ("srtb-ws", 4, 3, "16x8", np.float64, 37, 21, 9),
    ("srtb-ws", 8, 4, "64x4", np.float32, 70, 19, 11),
    ("stb", 8, 0, "16x8", np.float16, 45, 37, 67),
    ("srtb-ws", 4, 3, "32x8", np.float16, 45, 37, 9),
]


def _ids(c):
    return f"{c[0]}-s{c[1]}r{c[2]}-{c[3]}-{np.dtype(c[4]).name}-{c[5]}x{c[6]}-{c[7]}steps"


@pytest.mark.parametrize("cfg", FAST, ids=_ids)
def test_emulated_kernel_is_bit_exact(tmp_path, cfg):
    got, want = run_emulated(tmp_path, *cfg)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW, ids=_ids)
def test_emulated_kernel_is_bit_exact_more(tmp_path, cfg):
    got, want = run_emulated(tmp_path, *cfg)
    np.testing.assert_array_equal(got, want)

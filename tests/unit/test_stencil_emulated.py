"""The generated CUDA, run on the CPU through an emulation of the CUDA launch (tests/unit/cuda_emulator.py):
for every launch configuration of P2's space its output is bit-identical to the NumPy loop engine,
so the generated indexing, z-marching, periodic wrap and fixed ranges are right without a GPU."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.autotune import stencil_space
from nagare.engine.stencil import Loop
from nagare.engine.stencil.library import diffusion7, wave2d
from nagare.engine.stencil.loops import launch_grid

from tests.unit import cuda_emulator
from tests.unit.test_stencil import mixed

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernel")


def _check(st, shape, dtype, boundary, params, configs, rng, tmp_path):
    fn = cuda_emulator.build(st, dtype, boundary, tmp_path)
    arrays = {n: (rng.random(shape) + 0.5).astype(dtype) for n in st.inputs}
    want = {n: np.full(shape, -3.0, dtype) for n in st.outputs}
    Loop(st, shape, dtype, boundary=boundary)(**arrays, **want, **params)
    for cfg in configs:
        got = {n: np.full(shape, -3.0, dtype) for n in st.outputs}
        grid = launch_grid(st, shape, boundary, cfg["bx"], cfg["by"], cfg["zmarch"])
        cuda_emulator.launch(fn, st, dtype, grid, (cfg["bx"], cfg["by"]), {**arrays, **got}, params, cfg["zmarch"])
        for n in st.outputs:
            np.testing.assert_array_equal(got[n], want[n], err_msg=f"{st.name} {boundary} {cfg} output {n}")


def _valid_configs():
    space = stencil_space()
    return [space.config(k) for k in space.all_keys() if not space.invalid_reason(space.config(k))]


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_diffusion7_every_launch_configuration(boundary, rng, tmp_path):
    configs = _valid_configs()
    assert len(configs) == 145
    _check(diffusion7, (11, 9, 37), np.float32, boundary, {"r": 0.1}, configs, rng, tmp_path)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_wave2d_and_multi_output_stencil(boundary, rng, tmp_path):
    configs = _valid_configs()[::7]
    _check(wave2d, (23, 41), np.float64, boundary, {"c2": 0.3}, configs, rng, tmp_path)
    _check(mixed, (7, 9, 13), np.float32, boundary, {"s": 0.3, "t": 1.7}, configs, rng, tmp_path)


def test_grid_covers_the_update_range():
    assert launch_grid(diffusion7, (512, 512, 8), "periodic", 8, 16, 8) == (1, 32, 64)
    assert launch_grid(diffusion7, (12, 10, 8), "fixed", 4, 2, 4) == (2, 4, 3)  # 6×8×10 interior
    assert launch_grid(wave2d, (41, 23), "periodic", 8, 2, 4) == (3, 6, 1)

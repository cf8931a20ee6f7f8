"""`nagare tune show|clear`, `nagare stencil list|show`, and the stencil benchmark's table."""
from __future__ import annotations

import json

import numpy as np
import pytest
from nagare.app.cli import main
from nagare.engine.autotune import TuneCache, tune_key
from nagare.engine.backend import cupy_available
from nagare.engine.stencil.bench import format_table


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_tune_show_and_clear(cache_dir, capsys):
    cache = TuneCache(cache_dir / "autotune.json")
    cache.put(tune_key("NVIDIA H200", "stencil:diffusion7:abc", (512, 512, 512), np.float32, {"boundary": "periodic"}),
              {"bx": 128, "by": 1, "zmarch": 2}, 0.31)
    cache.put(tune_key("NVIDIA H200", "lbm:fused", (256, 256), np.float32), {"tile": 32}, 0.5)
    assert main(["tune", "show"]) == 0
    out = capsys.readouterr().out
    assert "2 tuned configuration(s)" in out and "bx=128 by=1 zmarch=2" in out and "512x512x512" in out
    assert main(["tune", "show", "--json", "--match", "lbm"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["NVIDIA H200|lbm:fused|256x256|float32|[]"]
    assert main(["tune", "clear", "--match", "stencil:"]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert main(["tune", "clear"]) == 0
    assert "removed 1" in capsys.readouterr().out and cache.load() == {}


def test_stencil_list_and_show(capsys):
    assert main(["stencil", "list"]) == 0
    listed = capsys.readouterr().out
    assert "diffusion7" in listed
    # each stencil's summary whole, on its own line (a docstring's first line alone ended mid-sentence)
    assert "Same summation order as engine/diffusion3d/reference.py, so the results agree bit for bit." in listed
    from nagare.engine.stencil.library import LIBRARY

    assert len(listed.strip().splitlines()) == len(LIBRARY)
    assert main(["stencil", "show", "wave2d", "--dtype", "float64", "--boundary", "fixed"]) == 0
    out = capsys.readouterr().out
    assert 'extern "C" __global__ void nagare_wave2d_fixed_double_u8(' in out and "u_next = " in out
    assert "_vec" not in out  # the vec shape is 3D only
    assert main(["stencil", "show", "diffusion7", "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    assert 'extern "C" __global__ void nagare_diffusion7_periodic_double_vec4(' in out and "__shfl_up_sync" in out
    assert "struct alignas(32) nagare_v4 { T e[4]; };" in out
    assert main(["stencil", "show", "tests.unit.test_stencil:mixed"]) == 0
    assert "nagare_mixed_periodic_float" in capsys.readouterr().out
    assert main(["stencil", "show", "nonexistent"]) == 2
    assert "unknown stencil 'nonexistent'" in capsys.readouterr().err


@pytest.mark.skipif(cupy_available()[0], reason="checks the no-GPU message")
def test_bench_stencil_without_gpu_is_one_line(capsys):
    assert main(["bench", "stencil"]) == 2
    assert "backend 'cupy' is not available" in capsys.readouterr().err


def test_format_table():
    live = {"strategy": "exhaustive", "pick": {"bx": 8, "by": 16, "zmarch": 8}, "calls": 581, "measured": 145,
            "overhead_steps": 312.4, "pick_vs_best": 1.012, "pick_vs_best_table": 1.031}
    result = {"device": {"name": "NVIDIA H200"}, "date": "2026-11-21", "bytes_per_point": 8,
              "copy_bandwidth_GB_s": 4000.0,
              "rows": [{"mesh": "8x512x512", "best": {"threads": [8, 16, 1], "zmarch": 8, "GB_s": 3000.0,
                                                       "pct_copy_bw": 75.0},
                        "fixed_128_1_1_z2": {"GB_s": 500.0, "pct_copy_bw": 12.5}, "speedup_vs_fixed": 6.0,
                        "autotune": [live, dict(live, strategy="descent", overhead_steps=None)]}]}
    text = format_table(result)
    row = ("| 8x512x512 | march | (8,16,1) | 8 | 3000 | 75.0 | — | 500 | 12.5 | 6.00× | (8,16,1)/8 (exhaustive) "
           "| 1.012 | 1.031 | 581 | 312 |")
    assert row in text
    assert "(descent) | 1.012 | 1.031 | 581 | — |" in text
    assert "Amortisation" not in text  # no row measured it
    result["rows"][0]["amortise"] = {"steps": 1000, "tuned_ms": 300.0, "fixed_ms": 700.0, "best_ms": 280.0,
                                     "overhead_steps": 71.4, "settled_after_calls": 260, "amortised": True}
    assert "| 8x512x512 | 300.0 | 700.0 | 280.0 | 71 | 260 | yes |" in format_table(result)


def test_format_table_reports_the_vec_shape():
    """A vec best (and vec as the best other shape) shows in the shape columns like the others."""
    vec = {"shape": "vec", "label": "vec (32,8,1)/4", "threads": [32, 8, 1], "zmarch": 4, "unroll": "vec4",
           "GB_s": 3825.0, "pct_copy_bw": 90.9}
    march = {"shape": "march", "label": "(32,4,1)/16", "threads": [32, 4, 1], "zmarch": 16, "unroll": 8,
             "GB_s": 2800.0, "pct_copy_bw": 66.5}
    live = {"strategy": "exhaustive", "pick": {"bx": 32, "by": 8, "zmarch": 4, "shape": "vec"}, "calls": 700,
            "measured": 249, "overhead_steps": 150.0, "pick_vs_best": 1.0, "pick_vs_best_table": 1.0}
    result = {"device": {"name": "NVIDIA H200"}, "date": "2026-11-23", "bytes_per_point": 8,
              "copy_bandwidth_GB_s": 4208.0,
              "rows": [{"mesh": "512x512x512", "best": vec, "best_by_shape": {"vec": vec, "march": march},
                        "fixed_128_1_1_z2": {"GB_s": 2000.0, "pct_copy_bw": 47.5}, "speedup_vs_fixed": 1.91,
                        "autotune": [live]}]}
    text = format_table(result)
    assert ("| 512x512x512 | vec | (32,8,1) | 4 | 3825 | 90.9 | (32,4,1)/16 (66.5) | 2000 | 47.5 | 1.91× | "
            "vec (32,8,1)/4 (exhaustive) | 1.000 | 1.000 | 700 | 150 |") in text

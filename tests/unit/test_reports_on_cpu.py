"""Reports as a CPU user reads them: a bench's Markdown names only what the device reports (no
"SMs None"), and a short soak says its hourly rate is fitted over seconds."""
from __future__ import annotations

from nagare.app import bench_report, soak


def _meta(device: dict) -> dict:
    return {"family": "wave2d", "device": device, "backend": "numpy", "roofline_gbytes_per_s": 12.5,
            "date": "2026-12-02", "nagare": "0.1.0", "command": "nagare bench wave2d"}


def test_a_cpu_bench_report_leaves_out_what_a_cpu_does_not_have():
    md = bench_report.markdown(_meta({"name": "CPU (x86_64, 2 threads)", "numpy_version": "2.5.2",
                                      "multiprocessors": None, "driver_version": None}), [])
    line = next(x for x in md.splitlines() if x.startswith("- device:"))
    assert line == "- device: CPU (x86_64, 2 threads) (backend numpy, NumPy 2.5.2)"
    gpu = bench_report.markdown(_meta({"name": "NVIDIA H200", "multiprocessors": 132, "driver_version": "580.159.04",
                                       "cuda_runtime": "13.2", "cupy_version": "14.2.0", "numpy_version": "2.5.2"}), [])
    assert ("(backend numpy, SMs 132, driver 580.159.04, CUDA runtime 13.2, CuPy 14.2.0, NumPy 2.5.2)"
            in gpu)


def _summary(seconds: float) -> dict:
    return {"steps": 100, "seconds": seconds, "warmup_s": 1.0, "rss_start_mib": 100.0, "rss_end_mib": 100.5,
            "rss_growth_mib": 0.5, "rss_mib_per_hour": 300.0, "rss_late_growth_mib": 0.0}


def test_a_short_soak_says_its_hourly_rate_means_little():
    short = soak.report_lines(_summary(6.0))[1]
    assert "+300.00 MiB/hour fitted over only 6 s: soak 5 minutes or more for a rate" in short
    long = soak.report_lines(_summary(600.0))[1]
    assert "+300.00 MiB/hour fitted)" in long and "only" not in long

"""How fast the backend's device can copy memory (the roofline reference), and the cache folder.

What the device is (:class:`DeviceInfo`) lives with the backend (engine/backend.py).

The copy bandwidth is measured once per device (a large device-to-device copy, counting bytes
read plus bytes written, median of several timed copies) and cached in the user's cache folder.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from .atomic import ExportError, output_writer, write_text_atomic
from .backend import Backend, device_info


def cache_dir() -> Path:
    base = os.environ.get("NAGARE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    path = Path(base).expanduser()
    if not os.environ.get("NAGARE_CACHE_DIR"):
        path = path / "nagare"
    return path


def _measure_copy_bandwidth(backend: Backend, nbytes: int, repeats: int) -> float:
    """Bytes read + written per second for a plain large copy, median of ``repeats``."""
    xp = backend.xp
    n = nbytes // 4
    src = xp.arange(n, dtype=xp.float32)  # not zeros: zeros can hide work and run faster
    dst = xp.empty_like(src)
    rates = []
    if backend.is_gpu:
        cp = backend.xp
        cp.cuda.Device().synchronize()  # nothing else queued may overlap the measurement
        stream = cp.cuda.Stream(non_blocking=False)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with stream:
            for _ in range(2):
                dst[...] = src  # warm-up
        for _ in range(repeats):
            with stream:
                start.record(stream)
                dst[...] = src
                end.record(stream)
            end.synchronize()
            ms = cp.cuda.get_elapsed_time(start, end)
            rates.append(2 * n * 4 / (ms * 1e-3))
    else:
        np.copyto(dst, src)
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            rates.append(2 * n * 4 / (time.perf_counter() - t0))
    return float(np.median(rates))


def copy_bandwidth(backend: Backend, *, refresh: bool = False) -> float:
    """Measured copy bandwidth of the backend's device in bytes/s, cached per device."""
    info = device_info(backend)
    path = cache_dir() / "bandwidth.json"
    cache: dict = {}
    try:
        cache = json.loads(path.read_text())
    except Exception:
        cache = {}
    if not refresh and info.key() in cache:
        return float(cache[info.key()]["bytes_per_s"])
    if backend.is_gpu:
        free = backend.xp.cuda.runtime.memGetInfo()[0]
        nbytes = int(min(2 << 30, free // 4))  # 2 GiB per buffer: far beyond any L2
        bw = _measure_copy_bandwidth(backend, nbytes, repeats=20)
    else:
        bw = _measure_copy_bandwidth(backend, 256 << 20, repeats=5)
    cache[info.key()] = {"bytes_per_s": bw, "device": info.name, "measured": time.strftime("%Y-%m-%d")}
    _store_bandwidth_cache(path, cache)
    return bw


@output_writer("the bandwidth cache")
def _store_bandwidth_cache(path: Path, cache: dict) -> None:
    try:
        write_text_atomic(path, json.dumps(cache, indent=1))
    except ExportError:
        pass  # a read-only cache folder only costs a re-measurement next time

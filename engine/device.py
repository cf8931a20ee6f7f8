"""What the machine is, and how fast it can copy memory (the roofline reference).

The copy bandwidth is measured once per device (a large device-to-device copy, counting bytes
read plus bytes written, median of several timed copies) and cached in the user's cache folder.
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .atomic import ExportError, output_writer, write_text_atomic

if TYPE_CHECKING:  # annotations only: backend.py imports this module lazily, so no import cycle
    from .backend import Backend


def cache_dir() -> Path:
    base = os.environ.get("NAGARE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    path = Path(base).expanduser()
    if not os.environ.get("NAGARE_CACHE_DIR"):
        path = path / "nagare"
    return path


@dataclass
class DeviceInfo:
    backend: str
    name: str
    multiprocessors: int | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None
    cuda_runtime: str | None = None
    cuda_driver: str | None = None
    driver_version: str | None = None
    cupy_version: str | None = None
    numpy_version: str = np.__version__

    def key(self) -> str:
        return f"{self.backend}:{self.name}:{self.compute_capability}:{self.memory_bytes}"

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line: the name, and for a GPU its size, compute capability, CUDA/driver and CuPy
        versions (what ``nagare info`` prints over several lines)."""
        if self.multiprocessors is None:
            return self.name
        parts = [f"{self.multiprocessors} SMs"]
        if self.memory_bytes:
            parts.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        if self.compute_capability:
            parts.append(f"compute capability {self.compute_capability}")
        versions = [f"CUDA runtime {self.cuda_runtime}", f"driver API {self.cuda_driver}",
                    f"driver {self.driver_version}"]
        tail = ", ".join(v for v in versions if not v.endswith("None"))
        cupy = f"; CuPy {self.cupy_version}" if self.cupy_version else ""
        return f"{self.name} ({', '.join(parts)}{'; ' + tail if tail else ''}{cupy})"


def _cuda_version_str(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _nvidia_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, present with many CUDA installs

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for tok in text.split():
            if tok.count(".") >= 1 and tok.replace(".", "").isdigit():
                return tok
    except Exception:
        pass
    return None


def device_info(backend: Backend) -> DeviceInfo:
    if not backend.is_gpu:
        name = platform.processor() or platform.machine() or "CPU"
        return DeviceInfo(backend="numpy", name=f"CPU ({name}, {os.cpu_count()} threads)")
    cp = backend.xp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else name
    return DeviceInfo(
        backend="cupy",
        name=name,
        multiprocessors=int(props["multiProcessorCount"]),
        memory_bytes=int(props["totalGlobalMem"]),
        compute_capability=f"{props['major']}.{props['minor']}",
        cuda_runtime=_cuda_version_str(cp.cuda.runtime.runtimeGetVersion()),
        cuda_driver=_cuda_version_str(cp.cuda.runtime.driverGetVersion()),
        driver_version=_nvidia_driver_version(),
        cupy_version=cp.__version__,
    )


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

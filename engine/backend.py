"""Array backends: NumPy (always) and CuPy (when a CUDA device is usable), and what device each
runs on (:class:`DeviceInfo`, what ``nagare info`` prints).

An engine receives a :class:`Backend` and allocates all of its state through ``backend.xp``.
The CuPy backend owns one non-blocking CUDA stream per engine (see :meth:`Backend.new_stream`).
"""
from __future__ import annotations

import logging
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BackendUnavailable

log = logging.getLogger("nagare")

BACKEND_CHOICES = ("auto", "numpy", "cupy")


@dataclass
class Backend:
    name: str  # "numpy" or "cupy"
    xp: Any
    reason: str = ""  # why auto picked this backend (empty when asked for explicitly)
    _cupy: Any = field(default=None, repr=False)

    @property
    def is_gpu(self) -> bool:
        return self.name == "cupy"

    def asnumpy(self, a) -> np.ndarray:
        if self.is_gpu and not isinstance(a, np.ndarray):
            return self._cupy.asnumpy(a)
        return np.asarray(a)

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def new_stream(self):
        """A fresh stream (CuPy) or None (NumPy).

        Blocking (non_blocking=False) on purpose: it stays ordered with CuPy's default stream, so a
        host read or a state write made outside the engine's stream (a frame copy, a test setting
        a state) never races with the engine's kernels.
        """
        if self.is_gpu:
            return self._cupy.cuda.Stream(non_blocking=False)
        return None

    def synchronize(self, stream=None) -> None:
        if self.is_gpu:
            (stream or self._cupy.cuda.get_current_stream()).synchronize()

    def device_info(self) -> DeviceInfo:
        return device_info(self)


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


def _cupy_or_reason():
    """Return (cupy module, "") if a CUDA device is usable through CuPy, else (None, reason)."""
    try:
        import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy is not installed ({type(exc).__name__}: {exc}); install nagare[gpu]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"CUDA is not usable ({type(exc).__name__}: {exc})"
    if n < 1:
        return None, "no CUDA device found"
    try:
        cupy.arange(4).sum().item()  # compiles nothing; proves the context and allocation work
    except Exception as exc:
        return None, f"the CUDA device cannot run work ({type(exc).__name__}: {exc})"
    return cupy, ""


_cache: dict[str, Backend] = {}


def cupy_available() -> tuple[bool, str]:
    cp, reason = _cupy_or_reason()
    return cp is not None, reason


def get_backend(name: str = "auto") -> Backend:
    """Resolve ``auto|numpy|cupy``. ``auto`` falls back to NumPy with one log line saying why."""
    if name not in BACKEND_CHOICES:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_CHOICES)}")
    if name in _cache:
        return _cache[name]
    if name == "numpy":
        be = Backend("numpy", np)
    elif name == "cupy":
        cp, reason = _cupy_or_reason()
        if cp is None:
            raise BackendUnavailable(f"backend 'cupy' is not available: {reason}")
        be = Backend("cupy", cp, _cupy=cp)
    else:
        cp, reason = _cupy_or_reason()
        if cp is None:
            log.warning("nagare: using the NumPy backend because %s", reason)
            be = Backend("numpy", np, reason=reason)
        else:
            be = Backend("cupy", cp, _cupy=cp)
    _cache[name] = be
    return be

"""Array backends: NumPy (always) and CuPy (when a CUDA device is usable).

An engine receives a :class:`Backend` and allocates all of its state through ``backend.xp``.
The CuPy backend owns one non-blocking CUDA stream per engine (see :meth:`Backend.new_stream`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
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

    def device_info(self):
        from .device import device_info

        return device_info(self)


def _cupy_or_reason():
    """Return (cupy module, "") if a CUDA device is usable through CuPy, else (None, reason)."""
    try:
        import cupy
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

"""How the lbm2d state is stored for one selection, and the way to and from the canonical state.

The canonical state is f[i, y, x] (post-collision, the preset's dtype). Internally:

- storage native + two-lattice: ``f`` is canonical, ``fn`` the second lattice;
- storage fp16: ``f`` holds (f − w_i) as float16 (DDF shifting);
- streaming aa: ``f`` is the single AA lattice in layout "P" or "Q" (see lbm2d.cu), and the
  never-changing non-fluid nodes are kept canonical in ``fixed``.

A :class:`Storage` is made from a selection (``storage`` and ``streaming`` axes), so converting a
state between two selections is ``Storage(new).load(Storage(old).canonical(state))``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import d2q9
from .d2q9 import CX, CY, OPP, Q, W


@dataclass
class LatticeState:
    """The stored lattice: what the steppers advance (and a CUDA graph records)."""
    f: Any
    fn: Any = None  # the second lattice (two-lattice streaming), else None
    layout: str | None = None  # AA streaming: "P" or "Q"
    fixed: Any = None  # AA streaming: canonical values of the non-fluid nodes


@dataclass(eq=False)
class Storage:
    xp: Any
    dtype: np.dtype  # the preset's (arithmetic and canonical) dtype
    mask_host: np.ndarray
    encoding: str = "native"  # the "storage" axis: native or fp16
    streaming: str = "two-lattice"  # the "streaming" axis: two-lattice or aa

    @classmethod
    def of(cls, selection: dict, xp, dtype, mask_host) -> Storage:
        return cls(xp, np.dtype(dtype), mask_host, selection["storage"], selection["streaming"])

    @property
    def stored_dtype(self) -> np.dtype:
        return np.dtype(np.float16) if self.encoding == "fp16" else self.dtype

    def encode(self, f):
        """Canonical (backend array, the preset's dtype or f64) → stored values."""
        xp = self.xp
        if self.encoding == "fp16":
            w = xp.asarray(W.astype(np.float32).reshape(Q, 1, 1))
            return (f.astype(xp.float32) - w).astype(xp.float16)
        return f.astype(self.dtype)

    def decode(self, s):
        xp = self.xp
        if s.dtype == np.float16:
            w = xp.asarray(W.astype(np.float32).reshape(Q, 1, 1))
            return s.astype(xp.float32) + w
        return s

    def load(self, f_host_or_dev) -> LatticeState:
        """A fresh stored state holding the canonical state ``f_host_or_dev``."""
        xp = self.xp
        f = xp.asarray(f_host_or_dev).astype(self.dtype)
        s = self.encode(f)
        fixed, layout = None, None
        if self.streaming == "aa":
            # AA never touches non-fluid nodes; their canonical values are constant: keep them here.
            fixed = f * xp.asarray(self.mask_host != d2q9.FLUID)[None]
            s = s[OPP].copy()  # layout P: A[opp(i)][x] = f_i(x)
            layout = "P"
        s = xp.ascontiguousarray(s)
        fn = None if self.streaming == "aa" else xp.empty_like(s)
        return LatticeState(s, fn, layout, fixed)

    def canonical(self, state: LatticeState, copy: bool = True):
        """The canonical state (the preset's dtype) of a state stored this way; with copy=False the
        stored array itself where it is already canonical (a read-only use: a checkpoint's copy)."""
        xp = self.xp
        s = state.f
        if self.streaming == "aa":
            if state.layout == "P":
                s = s[OPP]
            else:  # layout Q: A[i][x + c_i] = f_i(x)
                s = xp.stack([xp.roll(s[i], (-int(CY[i]), -int(CX[i])), axis=(0, 1)) for i in range(Q)])
            f = self.decode(s).astype(self.dtype)
            return xp.where(xp.asarray(self.mask_host == d2q9.FLUID)[None], f, state.fixed)
        return self.decode(s).astype(self.dtype, copy=copy)

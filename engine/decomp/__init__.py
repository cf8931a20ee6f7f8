"""Domain decomposition: a family's grid split along its slowest axis into N sub-domains, halos
exchanged between steps through a :class:`~.transport.Transport` (docs/multi-gpu.md).

    engine = Engine(preset, backend, parts=3, overlap="on")   # or [decomp] parts = 3 in the preset
    engine.step(100)                                          # the same bits as parts=1

Families: diffusion3d and wave2d (engine/decomp/stencil.py), lbm2d (engine/decomp/lbm2d.py).
"""
from .config import DecompConfig, DecompError, split_rows
from .engine import ADAPTERS, Decomposable, DecomposedMixin, decomposed_class
from .transport import HaloCopy, NcclTransport, SameDeviceTransport, Transport, make_transport, nccl_unavailable

__all__ = ["ADAPTERS", "DecompConfig", "DecompError", "Decomposable", "DecomposedMixin", "HaloCopy",
           "NcclTransport", "SameDeviceTransport", "Transport", "decomposed_class", "make_transport",
           "nccl_unavailable", "split_rows"]

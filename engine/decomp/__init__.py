"""Domain decomposition: a family's grid split along its slowest axis into N sub-domains, halos
exchanged between steps through a :class:`~.transport.Transport` (docs/multi-gpu.md).

    engine = create_engine(preset, backend, parts=3, overlap="on")  # or [decomp] parts = 3 in the preset
    engine.step(100)                                                # the same bits as parts=1

The mechanism only: a family that can be split declares its :class:`~.adapter.Adapter` in its
own folder and exposes it as ``DecompAdapter`` (engine/families.py); nothing here names a family.
"""
from .adapter import Adapter
from .config import DecompConfig, DecompError, DecomposablePreset, SplitAxis, split_rows
from .engine import DecomposedMixin, decomposed_class
from .transport import HaloCopy, NcclTransport, SameDeviceTransport, Transport, make_transport, nccl_unavailable

__all__ = ["Adapter", "DecompConfig", "DecompError", "DecomposablePreset", "DecomposedMixin", "HaloCopy",
           "NcclTransport", "SameDeviceTransport", "SplitAxis", "Transport", "decomposed_class", "make_transport",
           "nccl_unavailable", "split_rows"]

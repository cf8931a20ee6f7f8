"""Many small host arrays onto a device as one upload (a regrid's stepper rebuild, tree_stepper.py).

On a GPU each ``xp.asarray`` of a host array is an allocation and a copy from pageable memory that
the host waits for: tens of microseconds however small the array, and a regrid uploads a few dozen
tables a level. Packed into one byte buffer on the host, they cross in one copy, and each table is
a view of that buffer on the device (same dtype, shape and values as its own ``xp.asarray``).
"""
from __future__ import annotations

import numpy as np

ALIGN = 256  # bytes between the tables' starts: every dtype's alignment (CuPy's allocations are 512-byte aligned)


def upload_together(xp, arrays) -> list:
    """``[xp.asarray(a) for a in arrays]`` (host arrays, any dtypes; each made C-contiguous) as one
    upload: views of one device buffer, each starting at a multiple of ALIGN bytes. On NumPy the
    arrays themselves (C-contiguous), as xp.asarray gives them."""
    arrays = [np.asarray(a, order="C") for a in arrays]
    if xp is np:
        return arrays
    starts, end = [], 0
    for a in arrays:
        starts.append(end)
        end += -(-a.nbytes // ALIGN) * ALIGN
    packed = np.empty(max(end, ALIGN), np.uint8)
    for a, s in zip(arrays, starts):
        packed[s:s + a.nbytes] = a.reshape(-1).view(np.uint8)
    dev = xp.asarray(packed)
    out = []
    for a, s in zip(arrays, starts):
        if a.size == 0:  # (a view of no bytes cannot take a wider dtype)
            out.append(xp.empty(a.shape, a.dtype))
        else:
            out.append(dev[s:s + a.nbytes].view(a.dtype).reshape(a.shape))
    return out


_CONSTANTS: dict = {}


def constant(xp, key, make):
    """A read-only table on xp's current device, uploaded at its first use there and kept: ``make()``
    gives it on the host, ``key`` (hashable) names it. For tables that depend only on constants
    (the velocity set, a leaf's node positions), which a regrid's passes would otherwise upload at
    every call. Never write into the result. On NumPy ``make()`` itself, kept alike."""
    device = xp.cuda.runtime.getDevice() if xp is not np else None
    k = (xp.__name__, id(xp), device, key)
    if k not in _CONSTANTS:
        host = np.array(make(), order="C")
        host.flags.writeable = False
        if xp is np:
            _CONSTANTS[k] = host
        else:
            stream = xp.cuda.get_current_stream()
            if stream.is_capturing():  # a captured copy would fill the table only when the graph replays
                raise RuntimeError(f"amr3d: the constant table {key!r} is first asked for inside a CUDA graph "
                                   "capture; ask for it before capturing")
            dev = xp.asarray(host)
            stream.synchronize()  # every stream may read it from now on (the app reads on its own streams)
            _CONSTANTS[k] = dev
    return _CONSTANTS[k]

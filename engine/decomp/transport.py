"""Halo transports: how rows of one sub-domain's array reach another's halo.

A :class:`Transport` owns the devices and streams of the sub-domains and moves :class:`HaloCopy`
regions between their arrays. Two implementations:

- :class:`SameDeviceTransport`: every sub-domain on the engine's own device (NumPy, or one CuPy
  device); a halo copy is an array assignment. On CuPy with ``overlap`` the copies run on a second
  stream of the same device, ordered after the boundary update by an event; the compute stream
  waits for them (an event) before the next step reads the halos. Tested on NumPy here; on one
  CuPy device by the ``gpu``-marked tests.
- :class:`NcclTransport`: one sub-domain per GPU, driven from this one process (one stream per
  device), halo rows packed into contiguous buffers and moved by NCCL point-to-point
  (``ncclSend``/``ncclRecv`` inside one ``ncclGroupStart``/``ncclGroupEnd``) through
  ``cupy.cuda.nccl``. **Written but untested**: no machine with several GPUs has been lent to
  this project yet; the ``gpu``-marked 2/4-GPU test (tests/unit/test_decomp_gpu.py) is the check
  that must pass before it is relied on. It is import-guarded: constructing it without CuPy,
  NCCL or enough devices raises :class:`~.config.DecompError` with the reason.
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from .config import DecompError

log = logging.getLogger("nagare")


@dataclass(frozen=True)
class HaloCopy:
    """``arrays[dst][dst_index] = arrays[src][src_index]`` (the same logical array on two parts)."""
    src: int
    dst: int
    src_index: tuple
    dst_index: tuple


def region_size(shape, index) -> int:
    """Elements of ``a[index]`` for an array of ``shape`` (index: slices, integer lists, then the
    remaining axes whole), without touching an array."""
    total = 1
    for axis, n in enumerate(shape):
        ix = index[axis] if axis < len(index) else slice(None)
        total *= len(range(*ix.indices(n))) if isinstance(ix, slice) else len(ix)
    return int(total)


class Pending:
    """An exchange in flight; :meth:`wait` orders later work on the compute stream(s) after it."""

    def __init__(self, wait=None):
        self._wait = wait

    def wait(self) -> None:
        if self._wait is not None:
            self._wait()
            self._wait = None


class Transport(ABC):
    name: str = ""
    tested: bool = True  # False: written against the API, never run on the hardware it needs

    def __init__(self, backend, parts: int):
        self.backend, self.parts = backend, int(parts)

    # ---- where each part lives ---------------------------------------------------------------
    def xp(self, part: int):
        return self.backend.xp

    def device(self, part: int):
        """Context manager that makes the part's device current (nothing on NumPy / one device)."""
        return nullcontext()

    @abstractmethod
    def stream(self, part: int):
        """The part's compute stream (None on NumPy)."""

    @abstractmethod
    def put(self, part: int, array):
        """A fresh C-contiguous copy of ``array`` (host or the engine's device) on the part's device."""

    @abstractmethod
    def get(self, part: int, array):
        """``array`` (on the part's device) as an array on the engine's device (may be a view)."""

    # ---- halo exchange -----------------------------------------------------------------------
    @abstractmethod
    def start(self, arrays: list, copies: list[HaloCopy], overlap: bool = False) -> Pending:
        """Begin the copies (``arrays[p]``: the part p array they read and write) after the work
        already queued on the compute streams; with ``overlap`` on a side stream, so compute
        queued before :meth:`Pending.wait` runs concurrently."""

    def exchange(self, arrays: list, copies: list[HaloCopy]) -> None:
        self.start(arrays, copies).wait()

    def synchronize(self) -> None:  # noqa: B027 (optional hook: nothing to wait for by default)
        """Wait for every part's compute stream (end of a run; never per step)."""

    def describe(self) -> dict:
        return {"transport": self.name, "parts": self.parts, "tested": self.tested}


class SameDeviceTransport(Transport):
    """Every part on the engine's device; halos are array copies on that device."""

    name = "same-device"

    def __init__(self, backend, parts: int, stream=None):
        super().__init__(backend, parts)
        self._stream = stream
        self._side = None  # CuPy: the exchange stream of overlap mode (made on first use)

    def stream(self, part):
        return self._stream

    def put(self, part, array):
        xp = self.backend.xp
        return xp.array(xp.asarray(array), copy=True, order="C")

    def get(self, part, array):
        return array

    @staticmethod
    def _copy(arrays, copies):
        for c in copies:
            arrays[c.dst][c.dst_index] = arrays[c.src][c.src_index]

    def start(self, arrays, copies, overlap=False):
        if not self.backend.is_gpu or not overlap:
            # NumPy: synchronous copies; CuPy without overlap: copies queued on the compute stream.
            self._copy(arrays, copies)
            return Pending()
        cp = self.backend.xp
        if self._side is None:
            self._side = cp.cuda.Stream(non_blocking=True)
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(self._stream)
        self._side.wait_event(ready)
        with self._side:
            self._copy(arrays, copies)
        done = cp.cuda.Event(disable_timing=True)
        done.record(self._side)
        main = self._stream if self._stream is not None else cp.cuda.get_current_stream()
        return Pending(lambda: main.wait_event(done))

    def synchronize(self):
        self.backend.synchronize(self._stream)


_NCCL_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
               "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "int64": "NCCL_INT64"}


def nccl_unavailable(backend, parts: int) -> str | None:
    """Why :class:`NcclTransport` cannot be built for ``parts`` GPUs here (None: it can)."""
    if not backend.is_gpu:
        return "NCCL needs the CuPy backend"
    try:
        from cupy.cuda import nccl  # noqa: F401
    except Exception as exc:  # ImportError, or a CuPy built without NCCL
        return f"cupy.cuda.nccl is not importable ({type(exc).__name__}: {exc}); install the nvidia-nccl wheel"
    try:
        n = backend.xp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"cannot count CUDA devices ({type(exc).__name__}: {exc})"
    if n < parts:
        return f"{parts} GPUs asked for, {n} visible"
    return None


class NcclTransport(Transport):
    """One part per GPU, one process driving all of them; halos through NCCL send/recv.

    UNTESTED: written against ``cupy.cuda.nccl`` (NcclCommunicator.initAll, send, recv,
    groupStart/groupEnd) and NCCL's point-to-point semantics, but never run — no multi-GPU machine
    has been lent yet. tests/unit/test_decomp_gpu.py::test_nccl_matches_undecomposed (2 and 4
    GPUs, marked ``gpu``) is the check it must pass first.
    """

    name = "nccl"
    tested = False

    def __init__(self, backend, parts: int, devices: list[int] | None = None):
        super().__init__(backend, parts)
        reason = nccl_unavailable(backend, parts)
        if reason:
            raise DecompError(f"NCCL transport for {parts} parts: {reason}")
        import cupy
        from cupy.cuda import nccl

        self._cp, self._nccl = cupy, nccl
        self.devices = list(devices) if devices is not None else list(range(parts))
        if len(self.devices) != parts:
            raise DecompError(f"NCCL transport: {len(self.devices)} devices given for {parts} parts")
        log.warning("nagare: the NCCL halo transport is untested (no multi-GPU machine lent yet); "
                    "check results against --gpus 1")
        comms = nccl.NcclCommunicator.initAll(self.devices)  # CuPy ≥ 8: one communicator per device
        self.comms = list(comms) if isinstance(comms, (list, tuple)) else [comms] * parts
        self._streams, self._xstreams = [], []
        for d in self.devices:
            with cupy.cuda.Device(d):
                self._streams.append(cupy.cuda.Stream(non_blocking=False))  # compute, per device
                self._xstreams.append(cupy.cuda.Stream(non_blocking=True))  # NCCL, per device
        self._per_rank_comm = not isinstance(comms, (list, tuple))  # old CuPy: setCurrentComm(rank)

    def device(self, part):
        return self._cp.cuda.Device(self.devices[part])

    def stream(self, part):
        return self._streams[part]

    def put(self, part, array):
        host = self.backend.asnumpy(array)  # staged through the host: scatter is rare (start, restore)
        with self.device(part):
            return self._cp.array(host, copy=True, order="C")

    def get(self, part, array):
        with self.device(part):
            self._streams[part].synchronize()
            host = self._cp.asnumpy(array)
        with self._cp.cuda.Device(self.devices[0]):
            return self._cp.asarray(host)

    def _comm(self, part):
        if self._per_rank_comm:
            self.comms[part].setCurrentComm(part)
        return self.comms[part]

    def start(self, arrays, copies, overlap=False):
        cp, nccl = self._cp, self._nccl
        for p in range(self.parts):  # the NCCL streams start after the work queued so far
            with self.device(p):
                ev = cp.cuda.Event(disable_timing=True)
                ev.record(self._streams[p])
                self._xstreams[p].wait_event(ev)
        bufs = []
        for c in copies:  # pack each region into a contiguous buffer on the sender's NCCL stream
            with self.device(c.src), self._xstreams[c.src]:
                send = cp.ascontiguousarray(arrays[c.src][c.src_index])
            with self.device(c.dst), self._xstreams[c.dst]:
                recv = cp.empty(send.shape, send.dtype)
            bufs.append((c, send, recv))
        group_start = getattr(nccl, "groupStart", None)
        group_end = getattr(nccl, "groupEnd", None)
        group_start()
        try:
            for c, send, recv in bufs:
                if c.src == c.dst:
                    continue
                kind = getattr(nccl, _NCCL_TYPES[send.dtype.name])
                with self.device(c.src):
                    self._comm(c.src).send(send.data.ptr, send.size, kind, c.dst, self._xstreams[c.src].ptr)
                with self.device(c.dst):
                    self._comm(c.dst).recv(recv.data.ptr, recv.size, kind, c.src, self._xstreams[c.dst].ptr)
        finally:
            group_end()
        for c, send, recv in bufs:  # unpack on the receiver's NCCL stream
            with self.device(c.dst), self._xstreams[c.dst]:
                arrays[c.dst][c.dst_index] = send if c.src == c.dst else recv
        done = []
        for p in range(self.parts):
            with self.device(p):
                ev = cp.cuda.Event(disable_timing=True)
                ev.record(self._xstreams[p])
                done.append(ev)

        def wait():
            for p, ev in enumerate(done):
                with self.device(p):
                    self._streams[p].wait_event(ev)

        pending = Pending(wait)
        if not overlap:
            pending.wait()
        return pending

    def synchronize(self):
        for p in range(self.parts):
            with self.device(p):
                self._streams[p].synchronize()


def make_transport(name: str, backend, parts: int, stream=None) -> Transport:
    """The transport ``name`` ("auto", "same-device", "nccl") for ``parts`` sub-domains.

    auto: NCCL when the backend is CuPy, parts > 1 and as many GPUs are visible (and NCCL imports);
    otherwise N sub-domains on the engine's one device."""
    if name == "same-device":
        return SameDeviceTransport(backend, parts, stream)
    if name == "nccl":
        return NcclTransport(backend, parts)
    if name != "auto":
        raise DecompError(f"unknown transport {name!r}; allowed: auto, same-device, nccl")
    if parts > 1 and nccl_unavailable(backend, parts) is None:
        return NcclTransport(backend, parts)
    return SameDeviceTransport(backend, parts, stream)


def transport_bytes(arrays: list, copies: list[HaloCopy]) -> int:
    """Bytes one exchange moves (for the timings' exchange share)."""
    total = 0
    for c in copies:
        a: Any = arrays[c.src]
        total += region_size(a.shape, c.src_index) * a.dtype.itemsize
    return total

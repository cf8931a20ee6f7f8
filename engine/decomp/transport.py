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
  ``cupy.cuda.nccl``; regions that are contiguous on both sides (the stencil families' planes)
  are sent from and received into the arrays themselves. Checked bit for bit against the
  undecomposed run on 2 and 4 GPUs by tests/unit/test_decomp_gpu.py (``gpu``-marked). It is
  import-guarded: constructing it without CuPy, NCCL or enough devices raises
  :class:`~.config.DecompError` with the reason.
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

    def forget_bindings(self) -> None:  # noqa: B027 (optional hook: nothing cached by default)
        """The arrays exchanged so far are being replaced (an adapter's scatter): drop whatever was
        bound to them (device pointers), so no later exchange can touch freed memory."""

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
            self._side = _urgent_stream(cp)
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


def _urgent_stream(cp):
    """A non-blocking stream of the current device at the highest priority it allows (CUDA clamps
    a priority beyond the device's range to its end, so -100 is the highest): the halo exchange of
    overlap mode runs beside the interior update, and at equal priority the block scheduler may
    dispatch the interior's hundreds of thousands of blocks first and start the exchange only at
    the interior's tail. At high priority its blocks take the first SM slots that free."""
    try:
        return cp.cuda.Stream(non_blocking=True, priority=-100)
    except TypeError:  # a CuPy without stream priorities
        return cp.cuda.Stream(non_blocking=True)


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
    """One part per GPU, one process driving all of them; halos through NCCL send/recv
    (``cupy.cuda.nccl``: NcclCommunicator.initAll, send/recv inside groupStart/groupEnd).
    tests/unit/test_decomp_gpu.py::test_nccl_* (2 and 4 GPUs, marked ``gpu``) check it bit for bit
    against the undecomposed run (the runs are recorded in docs/multi-gpu.md).
    """

    name = "nccl"

    def __init__(self, backend, parts: int, devices: list[int] | None = None, stream=None):
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
        log.info("nagare: %d sub-domains on GPUs %s, halos through NCCL", parts, self.devices)
        comms = nccl.NcclCommunicator.initAll(self.devices)  # CuPy ≥ 8: one communicator per device
        self.comms = list(comms) if isinstance(comms, (list, tuple)) else [comms] * parts
        self._streams, self._xstreams = [], []
        for d in self.devices:
            with cupy.cuda.Device(d):
                self._streams.append(cupy.cuda.Stream(non_blocking=False))  # compute, per device
                self._xstreams.append(_urgent_stream(cupy))  # NCCL, per device
        if stream is not None and self.devices[0] == backend.xp.cuda.runtime.getDevice():
            # Part 0 computes on the engine's own stream, so the engine's phase timer (events on that
            # stream) sees part 0's step, which waits for every exchange: the step as a whole.
            self._streams[0] = stream
        self._per_rank_comm = not isinstance(comms, (list, tuple))  # old CuPy: setCurrentComm(rank)
        # Events re-recorded every exchange (a wait enqueued before the next record is unaffected).
        self._events = ([], [])
        for d in self.devices:
            with cupy.cuda.Device(d):
                self._events[0].append(cupy.cuda.Event(disable_timing=True))
                self._events[1].append(cupy.cuda.Event(disable_timing=True))
        self._buf_cache: dict = {}
        self._bound: dict = {}  # (id(copies), ids of the arrays) -> (arrays, pointer-level calls)

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

    def _plan(self, arrays, copies):
        """Per copy: whether its regions are contiguous on both sides (then NCCL sends from and
        receives into the arrays themselves: the slowest-axis planes of the stencil families), else
        the packed send and receive buffers, allocated once per (copies, shapes, dtype). An
        exchange then allocates nothing: host time per step is what limits one process driving
        several GPUs."""
        key = (id(copies), len(copies), tuple((a.shape, a.dtype.str) for a in arrays))
        hit = self._buf_cache.get(key)
        if hit is not None:
            return hit[1]
        plan = []
        for c in copies:
            # on the compute streams: a list index gathers (a kernel); its result is only looked at
            with self.device(c.src), self._streams[c.src]:
                sv = arrays[c.src][c.src_index]
            with self.device(c.dst), self._streams[c.dst]:
                dv = arrays[c.dst][c.dst_index]
            # Only basic slices give views: an integer-list index (lbm2d's AA fix-up directions)
            # gives a copy, which NCCL must not receive into.
            basic = all(isinstance(ix, slice) for ix in (*c.src_index, *c.dst_index))
            direct = basic and c.src != c.dst and sv.flags.c_contiguous and dv.flags.c_contiguous
            send = recv = None
            if not direct:  # allocated on the stream that packs / unpacks them without overlap
                with self.device(c.src), self._streams[c.src]:
                    send = self._cp.empty(sv.shape, sv.dtype)
                with self.device(c.dst), self._streams[c.dst]:
                    recv = send if c.src == c.dst else self._cp.empty(sv.shape, sv.dtype)
            plan.append((c, direct, send, recv, getattr(self._nccl, _NCCL_TYPES[sv.dtype.name])))
        if len(self._buf_cache) > 16:
            # buffers of older plans go back to CuPy's pool: no exchange may still be using them
            self.synchronize()
            for p in range(self.parts):
                with self.device(p):
                    self._xstreams[p].synchronize()
            self._buf_cache.clear()
        self._buf_cache[key] = (copies, plan)  # copies kept alive so its id stays unique
        return plan

    def forget_bindings(self):
        self._bound.clear()

    def _binding(self, arrays, copies):
        """When every copy is direct (contiguous on both sides: the stencil families' planes), the
        exchange reduces to NCCL calls on fixed pointers: (send device, send ptr, recv device, recv
        ptr, count, type, src part, dst part) per copy, bound once per set of arrays (the buffers
        rotate, so a few sets recur) — no slicing, no CuPy context managers per step. None otherwise.
        The entry keeps the arrays, so their ids cannot be reused while it lives; scatter drops it."""
        key = (id(copies), tuple(id(a) for a in arrays))
        hit = self._bound.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], arrays)):
            return hit[1]
        plan = self._plan(arrays, copies)
        if not all(direct for _c, direct, *_ in plan):
            return None
        calls = []
        for c, _direct, _send, _recv, kind in plan:
            with self.device(c.src):
                sv = arrays[c.src][c.src_index]
            with self.device(c.dst):
                dv = arrays[c.dst][c.dst_index]
            calls.append((self.devices[c.src], sv.data.ptr, self.devices[c.dst], dv.data.ptr, sv.size, kind,
                          c.src, c.dst))
        if len(self._bound) > 8:
            self._bound.clear()
        self._bound[key] = (list(arrays), calls)
        return calls

    def _start_bound(self, calls, overlap):
        """:meth:`start` for a bound exchange: the same operations on the same streams, with the
        device switched by the runtime call alone (the host time per step is what limits one
        process driving several GPUs)."""
        nccl, rt = self._nccl, self._cp.cuda.runtime
        streams = self._xstreams if overlap else self._streams
        ready, done = self._events
        prev = rt.getDevice()
        try:
            if overlap:
                for p, dev in enumerate(self.devices):
                    rt.setDevice(dev)
                    ready[p].record(self._streams[p])
                    self._xstreams[p].wait_event(ready[p])
            nccl.groupStart()
            try:
                for sdev, sptr, ddev, dptr, count, kind, src, dst in calls:
                    rt.setDevice(sdev)
                    self._comm(src).send(sptr, count, kind, dst, streams[src].ptr)
                    rt.setDevice(ddev)
                    self._comm(dst).recv(dptr, count, kind, src, streams[dst].ptr)
            finally:
                nccl.groupEnd()
            if overlap:
                for p, dev in enumerate(self.devices):
                    rt.setDevice(dev)
                    done[p].record(self._xstreams[p])
        finally:
            rt.setDevice(prev)
        if not overlap:
            return Pending()

        def wait():
            for p in range(self.parts):
                self._streams[p].wait_event(done[p])  # cudaStreamWaitEvent: any current device

        return Pending(wait)

    def start(self, arrays, copies, overlap=False):
        """Without overlap the NCCL calls go on the compute streams themselves (ordered after the
        update and before the next one, no events); with overlap on each device's NCCL stream,
        which waits for the boundary update, and the compute streams wait for it in ``wait``."""
        if all(c.src != c.dst for c in copies):
            calls = self._binding(arrays, copies)
            if calls is not None:
                return self._start_bound(calls, overlap)
        nccl = self._nccl
        streams = self._xstreams if overlap else self._streams
        ready, done = self._events
        if overlap:
            for p in range(self.parts):
                with self.device(p):
                    ready[p].record(self._streams[p])
                    self._xstreams[p].wait_event(ready[p])
        work = []
        for c, direct, send, recv, kind in self._plan(arrays, copies):
            # Indexing inside the stream: an integer-list index gathers (a kernel), which must be
            # ordered after the update on this stream.
            with self.device(c.src), streams[c.src]:
                if direct:
                    sv = arrays[c.src][c.src_index]
                else:
                    send[...] = arrays[c.src][c.src_index]  # pack
                    sv = send
            if direct:
                with self.device(c.dst):
                    target = arrays[c.dst][c.dst_index]  # a view: NCCL receives in place
            else:
                target = recv
            work.append((c, sv, target, direct, kind))
        nccl.groupStart()
        try:
            for c, sv, target, _direct, kind in work:
                if c.src == c.dst:
                    continue
                with self.device(c.src):
                    self._comm(c.src).send(sv.data.ptr, sv.size, kind, c.dst, streams[c.src].ptr)
                with self.device(c.dst):
                    self._comm(c.dst).recv(target.data.ptr, target.size, kind, c.src, streams[c.dst].ptr)
        finally:
            nccl.groupEnd()
        for c, sv, target, direct, _kind in work:  # unpack on the receiver's stream
            if not direct:
                with self.device(c.dst), streams[c.dst]:
                    arrays[c.dst][c.dst_index] = sv if c.src == c.dst else target
        if not overlap:
            return Pending()
        for p in range(self.parts):
            with self.device(p):
                done[p].record(self._xstreams[p])

        def wait():
            for p in range(self.parts):
                with self.device(p):
                    self._streams[p].wait_event(done[p])

        return Pending(wait)

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
        return NcclTransport(backend, parts, stream=stream)
    if name != "auto":
        raise DecompError(f"unknown transport {name!r}; allowed: auto, same-device, nccl")
    if parts > 1 and nccl_unavailable(backend, parts) is None:
        return NcclTransport(backend, parts, stream=stream)
    return SameDeviceTransport(backend, parts, stream)


def transport_bytes(arrays: list, copies: list[HaloCopy]) -> int:
    """Bytes one exchange moves (for the timings' exchange share)."""
    total = 0
    for c in copies:
        a: Any = arrays[c.src]
        total += region_size(a.shape, c.src_index) * a.dtype.itemsize
    return total

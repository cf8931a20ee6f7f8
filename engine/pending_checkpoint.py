"""Checkpoints taken without stopping the GPU (the app's "last good" state).

:meth:`Engine.checkpoint` copies the state to host memory and waits for it: for a 2048² D2Q9 run
that is 150 MB, and while the app ran it stalled the simulation ~100 ms every ~10 s
(docs/decisions.md D26). :func:`begin_checkpoint` instead

1. snapshots every device state array on the engine's stream (device → device: ~0.1 ms for
   150 MB; stream-ordered, so it is the state of this step whatever runs next);
2. hands the snapshots to a helper thread that waits for them (polling, GIL free) and copies them
   to ordinary host memory on a non-blocking side stream, while the simulation thread goes on
   launching steps and the GPU goes on computing;
3. returns a :class:`PendingCheckpoint`: :attr:`~PendingCheckpoint.done` says, without waiting,
   whether the copies are finished; :meth:`~PendingCheckpoint.result` is then the same
   ``{"meta", "arrays"}`` dict :meth:`Engine.checkpoint` returns, bit for bit.

Why a thread and pageable memory, not asynchronous copies into page-locked memory: the first
version did that, and allocating 150 MB of page-locked memory blocked the simulation thread for
160–200 ms (cudaHostAlloc pins every page) — the GPU ran dry and stalled longer than with the
synchronous copy (docs/decisions.md D26). The helper thread pays for the pageable copy's staging
instead; nothing is pinned.

Where the snapshots do not fit in device memory, or the arrays live on several devices (a
multi-GPU run), it falls back to the synchronous :meth:`Engine.checkpoint` (``route`` says which
was taken). NumPy engines take the synchronous checkpoint: there is no device to overlap with.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any

import numpy as np

_side_streams: dict[int, Any] = {}  # device id → the non-blocking stream the host copies run on
# engine → {"busy": bool, "arrays": {name: device buffer}}: the snapshot buffers kept between checkpoints
_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()
POLL_S = 5e-4  # the helper's sleep between queries of the snapshot's event


class PendingCheckpoint:
    """A checkpoint whose device → host copies may still be running on a helper thread."""

    def __init__(self, meta: dict, arrays: dict[str, np.ndarray], *, route: str = "synchronous"):
        self._meta = meta
        self._arrays = arrays  # host arrays; filled by the helper thread when there is one
        self._device_time: np.ndarray | None = None  # the clock, where it lives on the device
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.route = route  # "snapshot" (helper thread) or "synchronous"
        self.step = meta["step"]

    @property
    def done(self) -> bool:
        """Whether the copies have finished (never waits)."""
        return self._thread is None or not self._thread.is_alive()

    def result(self) -> dict[str, Any]:
        """The checkpoint, waiting for its copies if they are still running; the helper's error
        (a failed copy) is raised here."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        meta = dict(self._meta)
        if self._device_time is not None:
            meta["time"] = float(self._device_time[()])
        return {"meta": meta, "arrays": dict(self._arrays)}

    def _copy(self, device_id: int, snaps: dict, ready) -> None:
        """Helper thread: wait for the snapshots, then copy them to host memory."""
        try:
            while not ready.done:  # polled with sleeps: the GIL stays with the simulation and the UI
                time.sleep(POLL_S)
            import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

            with cp.cuda.Device(device_id):
                stream = _side_stream(device_id)
                for k, s in snaps.items():
                    h = np.empty(s.shape, s.dtype)
                    # pageable destination: returns once the copy is done (GIL released meanwhile)
                    cp.cuda.runtime.memcpyAsync(h.ctypes.data, s.data.ptr, s.nbytes,
                                                cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
                    if k == "\0time":
                        self._device_time = h
                    else:
                        self._arrays[k] = h
                stream.synchronize()
        except BaseException as exc:  # reported by result(), on the thread that asks
            self._error = exc
        finally:
            snaps.clear()  # the snapshots' device memory goes back to the pool


def begin_checkpoint(engine) -> PendingCheckpoint:
    """Start a checkpoint of ``engine``'s current state without waiting for the device."""
    if not engine.backend.is_gpu or engine.stream is None:
        return _synchronous(engine)
    import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    host: dict[str, np.ndarray] = {}
    device: dict[str, Any] = {}
    with engine.on_stream():  # state_arrays() may compute (a layout's canonical form): on the stream
        state = engine.state_arrays()
        dev = cp.cuda.Device().id
        if any(isinstance(v, cp.ndarray) and v.device.id != dev for v in state.values()):
            return _synchronous(engine)  # arrays on several devices: not worth a special path
        t = engine.device_time()
        if isinstance(t, cp.ndarray):  # a clock on the device (SPH): copied with the state
            device["\0time"] = t  # a copy already (device_time's contract)
            meta = engine.checkpoint_meta(time=0.0)  # result() fills it in
        else:
            meta = engine.checkpoint_meta(time=float(t))
        for k, v in state.items():
            if isinstance(v, cp.ndarray):
                device[k] = v
            else:  # host state (counters): copied now, it is this step's
                host[k] = np.array(v, copy=True)
        try:
            snaps = _snapshot(engine, device)
        except cp.cuda.memory.OutOfMemoryError:
            return _synchronous(engine)  # no room for a second copy of the state on the device
        try:
            ready = cp.cuda.Event(block=False, disable_timing=True)
            ready.record(engine.stream)
            pending = PendingCheckpoint(meta, host, route="snapshot")
            pending._thread = threading.Thread(target=pending._copy, args=(dev, snaps, ready),
                                               name="nagare-checkpoint", daemon=True)
            pending._thread.start()
        except BaseException:
            snaps.clear()  # the kept buffers are free again (no helper will copy from them)
            raise
    return pending


def release(engine) -> None:
    """Drop the snapshot buffers kept for ``engine`` (a state's worth of device memory), unless a
    helper thread still copies from them (then they go when it is done and the engine is gone)."""
    with _lock:
        kept = _buffers.get(engine)
        if kept is not None and not kept["busy"]:
            del _buffers[engine]


def _synchronous(engine) -> PendingCheckpoint:
    ckpt = engine.checkpoint()  # host copies the checkpoint owns (checkpoint()'s contract)
    return PendingCheckpoint(ckpt["meta"], ckpt["arrays"])


def _snapshot(engine, arrays: dict) -> dict:
    """Device copies of ``arrays`` on the current stream (OutOfMemoryError where they do not fit),
    into buffers kept for the engine's next checkpoint: allocating 150 MB for each one (a 2048²
    lattice) went to cudaMalloc whenever the pool had split the last block, and that stalled the
    simulation ~50 ms (docs/decisions.md D26). A second checkpoint begun while the first is still
    copying gets fresh arrays."""
    import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    with _lock:
        kept = _buffers.get(engine)
        fits = (kept is not None and not kept["busy"] and kept["arrays"].keys() == arrays.keys()
                and all(kept["arrays"][k].shape == v.shape and kept["arrays"][k].dtype == v.dtype
                        for k, v in arrays.items()))
        if fits:
            kept["busy"] = True
    if not fits:
        release(engine)  # buffers of another shape (a regrid): freed before new ones are allocated
        bufs = {k: cp.empty(v.shape, v.dtype) for k, v in arrays.items()}
        kept = {"busy": True, "arrays": bufs}
        with _lock:
            if engine not in _buffers or not _buffers[engine]["busy"]:
                _buffers[engine] = kept  # replaces buffers of another shape (a new preset, a regrid)
    for k, v in arrays.items():
        cp.copyto(kept["arrays"][k], v)
    return _Snapshots(kept)


class _Snapshots(dict):
    """The snapshot arrays, and the buffers' owner to mark free once the host copies are done."""

    def __init__(self, kept: dict):
        super().__init__(kept["arrays"])
        self._kept = kept

    def clear(self) -> None:
        with _lock:
            self._kept["busy"] = False
        super().clear()


def _side_stream(device_id: int):
    s = _side_streams.get(device_id)
    if s is None:
        import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

        s = _side_streams[device_id] = cp.cuda.Stream(non_blocking=True)
    return s

"""What one regrid of amr3d-vortex-adapt asks of a GPU, counted on the CPU, part by part.

    python tools/amr3d_regrid_count.py [--shift 12] [--rung naive-fused] [--storage native] [--regrids 2] [--top 12]

On a GPU a regrid is bound by launches and host round trips, not by arithmetic: every small array
operation costs ~5–20 µs of launch and CuPy's Python, every read of a device value on the host
(``.get()``, ``int(x)``, ``bool(x)``, ``.tolist()``, ``asnumpy``) waits for the device. So this
runs the engine's CuPy path (Backend("cupy")) on a counting stand-in for CuPy: arrays are NumPy
arrays of a subclass that counts, per regrid part (regrid_clock.REGRID_PARTS, lapped as the engine
laps them), every operation that would be a device launch (ufuncs, reductions, fancy indexing,
sorts, allocations, RawModule kernels), every host → device upload (and its bytes), every
synchronising read back, and the part's Python wall time (NumPy doing the arithmetic on the host:
an upper bound of the host part, not the GPU's time). Mixing a host array into a device operation
raises, as CuPy does. ``--top``: the call sites with the most operations and syncs (file:line).

The preset at its GPU size, its vortex moved by --shift level-0 units on the present tree (as
tools/amr3d_regrid_profile.py); --regrids fresh engines, the first counted apart (nothing compiles
here, but CuPy's first-use caches are not modelled either: every regrid is counted alike).
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
import types
from pathlib import Path

import numpy as np

_HERE = str(Path(__file__).resolve().parent.parent)


class Counts:
    """Counters of the part being run (``part``) and per call site."""

    def __init__(self):
        self.part = "other"
        self.by_part = collections.defaultdict(collections.Counter)
        self.sites = collections.Counter()
        self.running_sites = collections.Counter()
        self.enabled = False
        # in order: ("lap", part) at each lap, ("sync", site) at each wait for the device (a read-back
        # or a stream / device synchronisation): what the host waited for between which parts
        self.events = []

    def close(self, part: str) -> None:
        """The counts since the last close belong to ``part`` (a regrid's lap)."""
        if self.enabled:
            self.events.append(("lap", part))
        self.by_part[part].update(self.by_part.pop(self.part, collections.Counter()))
        for (kind, site), n in self.running_sites.items():
            self.sites[(part, kind, site)] += n
        self.running_sites.clear()

    def add(self, kind: str, n: int = 1) -> None:
        if not self.enabled:
            return
        if kind == "sized":
            self.add("op", n)
            kind = "sync"
        self.by_part[self.part][kind] += n
        if kind in ("sync", "stream_sync", "device_sync"):
            self.events.append(("sync", _site()))
        if kind in ("op", "upload", "sync", "kernel", "alloc"):
            self.running_sites[(kind, _site())] += n


COUNTS = Counts()


def _site() -> str:
    """The innermost frame of the repository's own code (engine/), outside this file."""
    for fr in reversed(traceback.extract_stack(limit=30)):
        if "/engine/" in fr.filename:
            return f"{fr.filename.split('/engine/')[-1]}:{fr.lineno} {fr.name}"
    return "?"


class DeviceArray(np.ndarray):
    """A NumPy array standing for a CuPy array: device operations on it are counted."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        COUNTS.add("op")
        inputs = tuple(_unwrap(a, strict=True) for a in inputs)
        if out is not None:
            kw["out"] = tuple(_unwrap(o, strict=True) for o in out)
        return _wrap(getattr(ufunc, method)(*inputs, **kw))

    def __array_function__(self, func, types_, args, kwargs):
        COUNTS.add("op")
        if func.__name__ in _SIZED:  # the result's size is on the device: CuPy reads it back
            COUNTS.add("sync")
        return _wrap(func(*_unwrap(args, strict=True), **_unwrap(kwargs, strict=True)))

    def __getitem__(self, idx):
        fancy = _fancy(idx)
        COUNTS.add("op" if fancy else "view")
        if _masked(idx):  # a boolean mask's count is read back (the result's size)
            COUNTS.add("sync")
        return _wrap(np.ndarray.__getitem__(self.view(np.ndarray), _unwrap(idx, strict=True)))

    def __setitem__(self, idx, value):
        COUNTS.add("op")
        np.ndarray.__setitem__(self.view(np.ndarray), _unwrap(idx, strict=True), _unwrap(value, strict=True))

    # a read of a device value on the host: a synchronisation
    def get(self, *a, **k):
        COUNTS.add("sync")
        COUNTS.add("download_bytes", self.nbytes)
        return np.array(self.view(np.ndarray))

    def _sync(self):
        COUNTS.add("sync")
        return self.view(np.ndarray)

    def __int__(self):
        return int(self._sync())

    def __float__(self):
        return float(self._sync())

    def __bool__(self):
        return bool(self._sync())

    def __index__(self):
        return self._sync().__index__()

    def item(self, *a):
        return self._sync().item(*a)

    def tolist(self):
        return self._sync().tolist()

    def __iter__(self):
        COUNTS.add("sync")
        return iter([_wrap(x) for x in self.view(np.ndarray)])

    # ndarray methods that NumPy runs in C without the array protocols: counted here
    def _method(name, kind="op"):  # noqa: N805 (a class-body factory)
        def f(self, *a, **k):
            COUNTS.add(kind)
            return _wrap(getattr(self.view(np.ndarray), name)(*_unwrap(a, strict=True), **_unwrap(k, strict=True)))
        f.__name__ = name
        return f

    astype = _method("astype")
    copy = _method("copy")
    argmax = _method("argmax")
    argmin = _method("argmin")
    argsort = _method("argsort")
    nonzero = _method("nonzero", "sized")
    cumsum = _method("cumsum")
    sort = _method("sort")
    fill = _method("fill")
    ravel = _method("ravel", "view")
    flatten = _method("flatten")
    del _method

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


# NumPy functions whose result's size depends on the device's data (CuPy synchronises for it)
_SIZED = {"nonzero", "flatnonzero", "argwhere", "unique", "compress", "extract", "bincount"}


def _masked(idx) -> bool:
    parts = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(p, np.ndarray) and p.dtype == bool for p in parts)


def _fancy(idx) -> bool:
    parts = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(p, (np.ndarray, list)) for p in parts)


def _unwrap(x, strict=False):
    if isinstance(x, DeviceArray):
        return x.view(np.ndarray)
    if strict and type(x) is np.ndarray and x.ndim > 0:
        raise TypeError(f"a host array ({x.dtype}, shape {x.shape}) in a device operation (CuPy raises here)")
    if isinstance(x, tuple):
        return tuple(_unwrap(a, strict) for a in x)
    if isinstance(x, list):
        return [_unwrap(a, strict) for a in x]
    if isinstance(x, dict):
        return {k: _unwrap(v, strict) for k, v in x.items()}
    return x


def _wrap(x):
    if isinstance(x, np.ndarray) and not isinstance(x, DeviceArray):
        return x.view(DeviceArray)
    if isinstance(x, np.generic):  # CuPy's reductions give 0-d device arrays
        return np.asarray(x).view(DeviceArray)
    if isinstance(x, tuple):
        return tuple(_wrap(a) for a in x)
    if isinstance(x, list):
        return [_wrap(a) for a in x]
    return x


def _upload(a, dtype=None, copy=False):
    if isinstance(a, DeviceArray):
        if dtype is not None and np.dtype(dtype) != a.dtype or copy:
            COUNTS.add("op")
            return _wrap(np.array(a.view(np.ndarray), dtype=dtype))
        return a
    host = np.array(a, dtype=dtype)
    COUNTS.add("upload")
    COUNTS.add("upload_bytes", host.nbytes)
    if COUNTS.enabled:
        COUNTS.running_sites[("up kB", _site())] += host.nbytes / 1024
    return host.view(DeviceArray)


def _creation(fn):
    def f(*a, **k):
        COUNTS.add("alloc")
        return _wrap(fn(*_unwrap(a, strict=True), **_unwrap(k, strict=True)))
    return f


class _Kernel:
    def __init__(self, name):
        self.name = name
        self.max_threads_per_block = 1024

    def __call__(self, grid, block, args, **kw):
        for a in args:
            if type(a) is np.ndarray:
                raise TypeError(f"{self.name}: a host array as a kernel argument")
        COUNTS.add("kernel")


class _ElementwiseKernel:
    """One launch; computed by the NumPy code it replaces (d3q27.moments' fused kernel is the only
    one the engine makes: its loop of additions in the same order)."""

    def __init__(self, in_params, out_params, operation, name, **kw):
        if name != "nagare_d3q27_moments":
            # a refusal, not a gap: counting another kernel needs its NumPy equivalent written here
            raise ValueError(f"the counting stand-in runs one elementwise kernel (nagare_d3q27_moments), not {name}")
        self.name = name

    def __call__(self, *args):
        from nagare.engine.amr3d import d3q27

        COUNTS.add("kernel")
        host = np.stack([_unwrap(a) for a in args])
        return _wrap(tuple(d3q27.moments(np, host)))


class _RawModule:
    def __init__(self, code="", options=(), name_expressions=None):
        self.code = code

    def compile(self):
        pass

    def get_function(self, name):
        return _Kernel(name)


class _Stream:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def wait_event(self, ev):
        pass

    def is_capturing(self):  # no graphs here
        return False

    def synchronize(self):
        COUNTS.add("stream_sync")

    ptr = 0


class _Event:
    def __init__(self, *a, **k):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        COUNTS.add("sync")

    done = True


def counting_cupy():
    """A module usable as ``cupy`` by the amr3d engine's CuPy path, counting as :class:`Counts`."""
    cp = types.ModuleType("cupy")
    for k in dir(np):
        if not k.startswith("__"):
            setattr(cp, k, getattr(np, k))
    cp.ndarray = DeviceArray
    cp.asarray = lambda a, dtype=None, **k: _upload(a, dtype)
    cp.array = lambda a, dtype=None, copy=True, **k: _upload(a, dtype, copy=copy)
    cp.ascontiguousarray = lambda a, dtype=None: _upload(a, dtype)
    cp.asnumpy = lambda a, *args, **k: a.get() if isinstance(a, DeviceArray) else np.asarray(a)
    for name in ("zeros", "empty", "ones", "full", "arange", "eye", "linspace", "zeros_like", "empty_like",
                 "ones_like", "full_like"):
        setattr(cp, name, _creation(getattr(np, name)))
    cp.RawModule = _RawModule
    cp.ElementwiseKernel = _ElementwiseKernel
    runtime = types.SimpleNamespace(
        getDevice=lambda: 0, memGetInfo=lambda: (1 << 36, 1 << 37), getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"name": b"counting stand-in", "multiProcessorCount": 132,
                                       "totalGlobalMem": 1 << 37, "major": 9, "minor": 0},
        runtimeGetVersion=lambda: 12090, driverGetVersion=lambda: 12090, streamCaptureModeRelaxed=0)
    cp.cuda = types.SimpleNamespace(
        Stream=_Stream, Event=_Event, get_current_stream=lambda: _Stream(), get_elapsed_time=lambda a, b: 0.0,
        Device=lambda *a: types.SimpleNamespace(id=0, synchronize=lambda: COUNTS.add("device_sync"),
                                                attributes={"MultiProcessorCount": 132, "ClockRate": 1000}),
        runtime=runtime, Graph=object)
    cp.__version__ = "counting"
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None, used_bytes=lambda: 0)
    cp.fuse = lambda *a, **k: (lambda f: f)
    return cp


def timeline(events) -> str:
    """Counts.events as one line: each lap's part, and ``wait×n`` for n waits in a row before it."""
    out, waits = [], 0
    for kind, what in events:
        if kind == "sync":
            waits += 1
            continue
        if waits:
            out.append(f"wait×{waits}")
            waits = 0
        out.append(what)
    return " → ".join(out + ([f"wait×{waits}"] if waits else []))


KINDS = ("op", "alloc", "view", "kernel", "upload", "sync", "waits")  # waits: stream / device synchronisations


def report(title: str, parts: dict, seconds: dict) -> None:
    print(f"\n{title}")
    print(f"{'part':16s} {'Python ms':>10s} " + " ".join(f"{k:>7s}" for k in KINDS) + f" {'up kB':>8s} {'down kB':>8s}")
    tot = collections.Counter()
    for part in list(seconds):
        c = collections.Counter(parts.get(part, collections.Counter()))
        c["waits"] = c["stream_sync"] + c["device_sync"]
        tot.update(c)
        print(f"{part:16s} {1e3 * seconds[part]:10.1f} " + " ".join(f"{c[k]:7d}" for k in KINDS)
              + f" {c['upload_bytes'] / 1024:8.0f} {c['download_bytes'] / 1024:8.0f}")
    print(f"{'total':16s} {1e3 * sum(seconds.values()):10.1f} " + " ".join(f"{tot[k]:7d}" for k in KINDS)
          + f" {tot['upload_bytes'] / 1024:8.0f} {tot['download_bytes'] / 1024:8.0f}")


def count_regrids(cp, preset, shift: float, rung: str = "naive-fused", regrids: int = 2, say=print,
                  serial: bool = False, storage: str = "native") -> list:
    """Per regrid (fresh engines on the counting stand-in ``cp``, which ``sys.modules["cupy"]`` must
    be): (counts per part, seconds per part, counts per call site), for ``preset``'s vortex moved by
    ``shift`` level-0 units on its present tree."""
    from nagare.engine.amr3d import cases, regrid_clock
    from nagare.engine.amr3d import tree_shape as tree_shape_mod
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend

    backend = Backend("cupy", cp, _cupy=cp)
    # (Backend.asnumpy takes any NumPy array as a host array: the stand-in's arrays are NumPy arrays)
    backend.asnumpy = lambda a: a.get() if isinstance(a, DeviceArray) else np.asarray(a)
    c = list(preset.initial.center)
    c[0] += shift
    moved = preset.model_copy(update={"initial": preset.initial.model_copy(update={"center": c})})
    lap = regrid_clock.RegridClock.lap

    def counted_lap(clock, part):  # the counts up to a lap belong to that part, as its time does
        lap(clock, part)
        COUNTS.close(part)

    regrid_clock.RegridClock.lap = counted_lap
    runs = []
    try:
        for i in range(regrids):
            tree_shape_mod._COUPLING_CACHE.clear()  # a regrid builds its new tree's coupling (never cached)
            e = AMR3D(preset, backend, variants={"kernels": rung, "storage": storage})
            e.shape.set_leaves(cases.initial_tree_state(moved, e.forest))
            e.shape.regrid_serial = serial
            COUNTS.by_part.clear()
            COUNTS.sites.clear()
            COUNTS.events.clear()
            COUNTS.part, COUNTS.enabled = "_running", True
            t = time.perf_counter()
            try:
                with e.on_stream():
                    ev = e.regrid()
            finally:
                COUNTS.enabled = False
            wall = time.perf_counter() - t
            rec = e.shape.regrid_times[-1]
            parts = {k: v for k, v in COUNTS.by_part.items() if k != "_running"}
            seconds = {k: rec[f"{k}_ms"] / 1e3 for k in regrid_clock.REGRID_PARTS}
            runs.append((parts, seconds, dict(COUNTS.sites)))
            say(f"regrid {i}: {ev['refined']} split, {ev['coarsened']} merged → {ev['leaves']} leaves; "
                f"wall {1e3 * wall:.1f} ms")
    finally:
        regrid_clock.RegridClock.lap = lap
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shift", type=float, default=12.0)
    ap.add_argument("--rung", default="naive-fused")
    ap.add_argument("--regrids", type=int, default=2)
    ap.add_argument("--storage", default="native", help="native | fp16 (the naive rungs' fp16 level buffers)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--serial", action="store_true", help="the device waited for between the parts (as a profile)")
    a = ap.parse_args(argv)
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    cp = counting_cupy()
    sys.modules["cupy"] = cp
    from nagare.engine.presets import load_preset

    runs = count_regrids(cp, load_preset("amr3d-vortex-adapt", backend="cupy"), a.shift, a.rung, a.regrids,
                         serial=a.serial, storage=a.storage)
    parts, seconds, sites = runs[-1]
    report(f"per part (the last of {a.regrids} regrids; rung {a.rung}, storage {a.storage}"
           f"{'; serial' if a.serial else ''})",
           parts, seconds)
    print("\nin order (laps, and the host's waits for the device between them):\n  " + timeline(COUNTS.events))
    if a.top:
        print(f"\ncall sites with the most counts (part, kind, site: count), top {a.top}")
        for (part, kind, site), n in sorted(sites.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {part:14s} {kind:7s} {n:8.0f}  {site}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

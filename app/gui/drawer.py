"""The canvas' drawers' common ground: the :class:`Drawer` base (how the canvas shows one packet
kind) and :func:`host`, a packet's array on the host, copied on this thread's private stream and
counted (:class:`HostBytes`: the display's device→host traffic, 0 a frame on the interop path).

Its own module so that the drawers of app/gui/canvas.py, profile1d.py and view3d.py and the probes
(probe.py) all build on it without importing the canvas, which imports them to register them.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager

import numpy as np
from nagare.app.packets import FramePacket, length_units

from .axes2d import AxesSpec
from .ticks import axis_title

_copy_streams = threading.local()


def copy_stream():
    """This thread's private non-blocking stream for device→host copies of frame packets."""
    s = getattr(_copy_streams, "stream", None)
    if s is None:
        import cupy  # optional dependency: only a CuPy packet comes here

        s = _copy_streams.stream = cupy.cuda.Stream(non_blocking=True)
    return s


class HostBytes:
    """Device→host bytes a display copied (``total``) in how many copies, and by whom (``by``: the
    caller's label → bytes), so a benchmark can say what still goes through the host."""

    def __init__(self):
        self.total = 0
        self.copies = 0
        self.by: dict[str, int] = {}

    def add(self, nbytes: int, what: str = "") -> None:
        self.total += int(nbytes)
        self.copies += 1
        self.by[what] = self.by.get(what, 0) + int(nbytes)


_sinks = threading.local()


@contextmanager
def counting_host_bytes(counter: HostBytes):
    """Every :func:`host` copy of a device array on this thread, inside the block, adds to ``counter``."""
    previous = getattr(_sinks, "counter", None)
    _sinks.counter = counter
    try:
        yield counter
    finally:
        _sinks.counter = previous


def host(a, backend: str, what: str = ""):
    """A packet's array as a host NumPy array; a device array's copy is counted (``what``: who asked)."""
    if a is None:
        return None
    if backend == "cupy" and not isinstance(a, np.ndarray | np.generic):
        # A packet is drawn only once its event is done, so its data is ready. Copying on the
        # default stream would instead wait behind every step the engine has queued since
        # (the engine's stream is ordered with the default stream): copy on a private stream.
        out = a.get(stream=copy_stream())
        counter = getattr(_sinks, "counter", None)
        if counter is not None:
            counter.add(out.nbytes, what)
        return out
    return np.asarray(a)


class Drawer(ABC):
    """How the canvas shows one packet kind (register an instance: ``register("draw", kind, d)``).

    Called on the UI thread with the GL context current, once the packet's event is done.
    ``canvas`` is the FieldCanvas (app/gui/canvas.py, which imports this module)."""

    visuals: tuple[str, ...] = ()  # names in FieldCanvas.visuals shown while this kind is on screen
    label = "host (geometry)"  # the display path the status bar reports for this kind
    aspect: float | None = 1.0  # the pan/zoom camera's aspect; None: x and y scale apart (a line plot)

    def setup(self, canvas) -> None:  # noqa: B027  (an optional hook: nothing by default)
        """Called when this kind comes on screen, before its visuals are shown: a kind with
        visuals of its own adds them here on first use (``canvas.add_visual``)."""

    def three_d(self, pk: FramePacket) -> bool:
        """True: orbit (turntable) camera; False: pan/zoom."""
        return False

    @abstractmethod
    def upload(self, canvas, pk: FramePacket) -> None:
        """Put the packet's data into this kind's visuals."""

    def fit(self, canvas, pk: FramePacket) -> None:  # noqa: B027  (an optional hook: nothing by default)
        """Frame the data once the kind or the shape changed (canvas.fit_bounds helps)."""

    def axes(self, pk: FramePacket) -> AxesSpec | None:
        """The axes beside a 2D view: the packet's axis names in its length units, from its origin,
        over the field's :meth:`extent`. None (no axes) for the 3D views, which draw their own."""
        if self.three_d(pk):
            return None
        u = length_units(pk)
        (xn, yn), origin = pk.axis_names, pk.origin
        return AxesSpec(axis_title(xn, u), axis_title(yn, u), (float(origin[0]), float(origin[1])),
                        self.extent(pk))

    def extent(self, pk: FramePacket) -> tuple:
        """The field's (x, y) extent in world coordinates, each (lo, hi) or None (unbounded): the
        axes label it and nothing beyond it."""
        return None, None

    def display_label(self, canvas) -> str:
        return self.label

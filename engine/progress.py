"""Progress of slow engine work a caller may want to show (the app's window, while a preset is
built): building an octree, compiling a kernel. The engine code calls :func:`report`; a caller that
shows progress wraps the work in :func:`reporting`, per thread (the app builds and steps its engine
on one simulation thread). Without a listener a report costs one attribute lookup.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_local = threading.local()


@contextmanager
def reporting(listener: Callable[[str, float | None], None]) -> Iterator[None]:
    """Send this thread's reports to ``listener(stage, fraction or None)`` inside the block."""
    previous = getattr(_local, "listener", None)
    _local.listener = listener
    try:
        yield
    finally:
        _local.listener = previous


def report(stage: str, fraction: float | None = None) -> None:
    """Say what the engine is doing now ("building the octree"), with the share done if known."""
    listener = getattr(_local, "listener", None)
    if listener is not None:
        listener(stage, fraction)

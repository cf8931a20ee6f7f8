"""Waiting for a worker thread without a Qt event loop (the tests of the worker alone)."""
from __future__ import annotations

import time


def wait_until(pred, timeout: float = 20.0) -> None:
    """Poll ``pred`` every 10 ms until it holds; TimeoutError after ``timeout`` seconds."""
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.01)

"""engine/pending_checkpoint.py: a checkpoint started without waiting for the device is the same
checkpoint, bit for bit, as the synchronous one at its step, and the engine stepping on does not
change it (the app's last-good state)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

from tests.unit.test_resume_and_batching import SHRINK, _presets


def _assert_same_checkpoint(got: dict, want: dict, what: str) -> None:
    assert got["meta"] == want["meta"], what
    assert got["arrays"].keys() == want["arrays"].keys(), what
    for k, v in want["arrays"].items():
        assert got["arrays"][k].dtype == v.dtype, f"{what}: {k}"
        np.testing.assert_array_equal(got["arrays"][k], v, err_msg=f"{what}: state '{k}'")


@pytest.mark.parametrize("name,over", _presets())
def test_numpy_pending_checkpoint_is_the_checkpoint_and_owns_its_arrays(name, over):
    eng = create_engine(load_preset(name, over, backend="numpy"), get_backend("numpy"))
    eng.step(3)
    pending = eng.begin_checkpoint()
    assert pending.done and pending.step == 3 and pending.route == "synchronous"
    want = eng.checkpoint()
    eng.step(2)  # NumPy state arrays are live: the pending checkpoint must hold copies
    _assert_same_checkpoint(pending.result(), want, name)


def _one_preset_per_family() -> list:
    """The first preset of each family, and every preset with a device clock or tracers."""
    from nagare.engine.presets import preset_names

    seen, out = set(), []
    for name in preset_names():
        fam = load_preset(name, backend="numpy").engine
        if fam not in seen or name in ("lbm2d-cylinder", "sph-dambreak2d"):
            seen.add(fam)
            out.append(pytest.param(name, SHRINK.get(fam, []), id=name))
    return out


def _gpu_engine(name, over):
    """The preset on CuPy, shrunk where its grid takes the family's shrinking overrides."""
    try:
        preset = load_preset(name, over, backend="cupy")
    except Exception:  # a grid given another way: its own size
        preset = load_preset(name, backend="cupy")
    return create_engine(preset, get_backend("cupy"))


@pytest.mark.gpu
@pytest.mark.parametrize("route", ["snapshot", "synchronous"])
@pytest.mark.parametrize("name,over", _one_preset_per_family())
def test_gpu_pending_checkpoint_is_the_state_of_its_step_whatever_runs_after(name, over, route, monkeypatch):
    """Started at step 3, read after 5 more steps (and, for the synchronous route, with no room
    for a device snapshot): bit for bit the synchronous checkpoint of step 3, time included."""
    import cupy as cp
    from nagare.engine import pending_checkpoint as pc

    if route == "synchronous":
        def no_room(engine, arrays):
            raise cp.cuda.memory.OutOfMemoryError(1 << 40, 0)
        monkeypatch.setattr(pc, "_snapshot", no_room)
    eng = _gpu_engine(name, over)
    eng.step(3)
    pending = eng.begin_checkpoint()
    want = eng.checkpoint()
    eng.step(5)
    assert pending.route == route
    got = pending.result()
    assert pending.done
    _assert_same_checkpoint(got, want, name)
    eng.synchronize()


def test_an_error_of_the_helper_thread_is_raised_by_result():
    """A failed copy must not pass for a checkpoint: result() raises what the helper met."""
    from nagare.engine import pending_checkpoint as pc

    class Boom:
        @property
        def done(self):
            raise RuntimeError("copy failed: device lost")

    pending = pc.PendingCheckpoint({"step": 7}, {}, route="snapshot")
    import threading

    pending._thread = threading.Thread(target=pending._copy, args=(0, {"f": object()}, Boom()))
    pending._thread.start()
    pending._thread.join()
    assert pending.done
    with pytest.raises(RuntimeError, match="device lost"):
        pending.result()


@pytest.mark.gpu
@pytest.mark.parametrize("name,over", _one_preset_per_family())
def test_gpu_begin_checkpoint_never_waits_for_the_device(name, over):
    """begin_checkpoint (and the state_arrays() it calls) makes no host read of a device value:
    the app takes its last-good checkpoint while the simulation keeps the GPU busy. A host read
    there drained the whole run-ahead and stalled a 2048² lbm2d run ~60–85 ms (docs/decisions.md D26)."""
    import cupyx

    eng = _gpu_engine(name, over)
    eng.step(3)
    eng.synchronize()
    with cupyx.allow_synchronize(False):
        pending = eng.begin_checkpoint()
    assert pending.route == "snapshot"
    _assert_same_checkpoint(pending.result(), eng.checkpoint(), name)


@pytest.mark.gpu
def test_gpu_snapshot_buffers_are_reused_only_when_free(monkeypatch):
    """A checkpoint begun while the first one's helper still copies (held here until released)
    gets its own buffers; once both are done the kept buffers serve the next one (no allocation);
    every result is its own step's state."""
    import threading

    from nagare.engine import pending_checkpoint as pc

    gate = threading.Event()
    copy = pc.PendingCheckpoint._copy

    def held_copy(self, *args):
        gate.wait(30)
        copy(self, *args)

    eng = create_engine(load_preset("lbm2d-cylinder", SHRINK["lbm2d"], backend="cupy"), get_backend("cupy"))
    eng.step(2)
    monkeypatch.setattr(pc.PendingCheckpoint, "_copy", held_copy)
    first = eng.begin_checkpoint()
    want_first = eng.checkpoint()
    kept = pc._buffers[eng]
    ptrs = {k: v.data.ptr for k, v in kept["arrays"].items()}
    assert kept["busy"] and not first.done
    eng.step(3)
    second = eng.begin_checkpoint()  # the first still copies: fresh buffers, the kept ones untouched
    want_second = eng.checkpoint()
    eng.step(4)
    gate.set()
    _assert_same_checkpoint(first.result(), want_first, "first")
    _assert_same_checkpoint(second.result(), want_second, "second")
    assert pc._buffers[eng] is kept and not kept["busy"]
    monkeypatch.undo()
    third = eng.begin_checkpoint()  # everything done: the kept buffers again
    assert pc._buffers[eng] is kept and {k: v.data.ptr for k, v in kept["arrays"].items()} == ptrs
    want_third = eng.checkpoint()
    eng.step(1)
    _assert_same_checkpoint(third.result(), want_third, "third")
    pc.release(eng)
    assert eng not in pc._buffers

"""Issue 18 without a display: the 3D interop plans and call order (fake cuda-python), the
worker-side snapshots of the 3D kinds, and what the preset list says runs on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui import interop

from tests.app.test_interop import FakeEvent


class FakeDeviceArray:
    class _Mem:
        ptr = 0xD0000

    class _Flags:
        c_contiguous = True

    def __init__(self, shape):
        a = np.zeros(shape, np.float32)
        self.shape, self.dtype, self.strides, self.nbytes = a.shape, a.dtype, a.strides, a.nbytes
        self.data, self.flags = self._Mem(), self._Flags()


class FakeCudart3D:
    """Enough of cuda.bindings.runtime for VolumeInterop and BufferInterop; logs calls and args."""

    class cudaGraphicsRegisterFlags:
        cudaGraphicsRegisterFlagsWriteDiscard = 2

    class cudaMemcpyKind:
        cudaMemcpyDeviceToDevice = 3

    class cudaMemcpy3DParms:
        pass

    cudaStreamNonBlocking = 1

    def __init__(self, mapped_bytes=None):
        self.calls: list[tuple] = []
        self.mapped_bytes = mapped_bytes

    @staticmethod
    def make_cudaPitchedPtr(ptr, pitch, xsize, ysize):
        return ("pitched", ptr, pitch, xsize, ysize)

    @staticmethod
    def make_cudaExtent(w, h, d):
        return ("extent", w, h, d)

    def __getattr__(self, name):
        if not name.startswith("cuda"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, args))
            if name == "cudaGraphicsResourceGetMappedPointer":
                return (0, 0xB0000, self.mapped_bytes)
            if name in ("cudaGraphicsGLRegisterImage", "cudaGraphicsGLRegisterBuffer", "cudaStreamCreateWithFlags",
                        "cudaGraphicsSubResourceGetMappedArray"):
                return (0, f"<{name}>")
            return (0,)
        return call


def _recorder(rt):
    def record():
        rt.calls.append(("record", ()))
        return FakeEvent()
    return record


def test_plan_copy3d_checks_shape_dtype_and_layout():
    p = interop.plan_copy3d((4, 5, 6), np.float32, (120, 24, 4), (4, 5, 6))
    assert (p.width, p.height, p.depth, p.src_pitch, p.width_bytes) == (6, 5, 4, 24, 24)
    with pytest.raises(ValueError, match="does not match"):
        interop.plan_copy3d((4, 5, 6), np.float32, (120, 24, 4), (4, 5, 7))
    with pytest.raises(ValueError, match="r32f"):
        interop.plan_copy3d((4, 5, 6), np.float64, (240, 48, 8), (4, 5, 6))
    with pytest.raises(ValueError, match="contiguous"):
        interop.plan_copy3d((4, 5, 6), np.float32, (4, 24, 96), (4, 5, 6))
    assert interop.plan_buffer(48, 48, True) == 48
    with pytest.raises(ValueError, match="bytes"):
        interop.plan_buffer(48, 96, True)


def test_volume_interop_registers_a_3d_texture_and_copies_after_the_snapshot_event():
    rt = FakeCudart3D()
    vi = interop.VolumeInterop(9, (4, 5, 6), cudart=rt, record_event=_recorder(rt))
    reg = [args for name, args in rt.calls if name == "cudaGraphicsGLRegisterImage"]
    assert len(reg) == 1 and reg[0][:2] == (9, interop.GL_TEXTURE_3D)

    class Ev:
        ptr = 0xE

    arr = FakeDeviceArray((4, 5, 6))
    vi.upload(arr, Ev())
    seq = [c[0] for c in rt.calls[2:]]
    assert seq == ["cudaStreamWaitEvent", "cudaGraphicsMapResources", "cudaGraphicsSubResourceGetMappedArray",
                   "cudaMemcpy3DAsync", "cudaGraphicsUnmapResources", "record"]
    parms = rt.calls[5][1][0]
    assert parms.srcPtr == ("pitched", 0xD0000, 24, 6, 5) and parms.extent == ("extent", 6, 5, 4)
    assert len(vi.in_flight) == 1  # the snapshot is held until the copy's event is done
    with pytest.raises(ValueError):
        vi.upload(FakeDeviceArray((4, 5, 7)))


def test_buffer_interop_copies_into_the_mapped_vbo():
    rt = FakeCudart3D(mapped_bytes=120)
    bi = interop.BufferInterop(3, 120, cudart=rt, record_event=_recorder(rt))
    assert ("cudaGraphicsGLRegisterBuffer", (3, 2)) in rt.calls
    bi.upload(FakeDeviceArray((10, 3)))
    copy = [c for c in rt.calls if c[0] == "cudaMemcpyAsync"]
    assert copy and copy[0][1][:3] == (0xB0000, 0xD0000, 120)
    assert [c[0] for c in rt.calls][-2:] == ["cudaGraphicsUnmapResources", "record"]
    small = FakeCudart3D(mapped_bytes=60)
    bi2 = interop.BufferInterop(3, 120, cudart=small, record_event=_recorder(small))
    with pytest.raises(RuntimeError, match="60 bytes"):
        bi2.upload(FakeDeviceArray((10, 3)))
    assert [c[0] for c in small.calls][-2:] == ["cudaGraphicsUnmapResources", "record"]  # unmapped on failure


# ---- worker-side snapshots -------------------------------------------------------------------------------
def _engine(name):
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    preset = load_preset(name, backend="numpy")
    return create_engine(preset, get_backend("numpy"))


def test_grid3d_snapshot_in_3d_mode_carries_the_whole_volume():
    from nagare.app.gui.worker import ViewRequest, snapshot

    eng = _engine("diffusion3d")
    pk = snapshot(eng, ViewRequest(field="f"), 1)
    assert pk.kind == "volume3d" and pk.data.shape == (64, 64, 64)
    np.testing.assert_array_equal(pk.data, eng.field("f").data.astype(np.float32))
    assert pk.data is not eng.field("f").data and pk.label == "f"
    pk2 = snapshot(eng, ViewRequest(field="f", mode="slice"), 2)
    assert pk2.kind == "grid3d" and pk2.data.shape == (64, 64)


def test_sph3d_snapshot_hides_walls_and_names_the_obstacle_and_spacing():
    from nagare.app.fieldkinds.particles import HIDDEN
    from nagare.app.gui.worker import ViewRequest, snapshot

    eng = _engine("sph-dambreak3d")
    f = eng.field("particles")
    kind = np.asarray(f.attributes["kind"])
    pk = snapshot(eng, ViewRequest(field="particles", attribute="speed"), 1)
    assert pk.radius == pytest.approx(eng.preset.particles.dp / 2)
    g = eng.preset.geometry
    (lo, hi), = pk.solids
    np.testing.assert_allclose(lo, (g.obstacle[0], g.obstacle[1], 0.0))
    np.testing.assert_allclose(hi, (g.obstacle[0] + g.obstacle[2], g.obstacle[1] + g.obstacle[3], g.tank_height))
    assert (pk.data[kind != 0] == np.float32(HIDDEN)).all() and (pk.data[kind == 0] > -1e30).all()
    assert float(pk.vmax) == pytest.approx(float(np.asarray(f.attributes["speed"])[kind == 0].max()))
    shown = snapshot(eng, ViewRequest(field="particles", attribute="speed", hide_walls=False), 2)
    assert (shown.data > -1e30).all()


def test_amr3d_volume_packet_carries_the_leaves_with_levels():
    from nagare.app.gui.worker import ViewRequest, snapshot

    eng = _engine("amr3d-periodic")
    pk = snapshot(eng, ViewRequest(field="speed"), 1, cache={})
    assert pk.kind == "volume3d" and pk.boxes is not None
    lo, hi, level = pk.boxes
    assert lo.shape == hi.shape and len(level) == len(lo) and (hi > lo).all()
    off = snapshot(eng, ViewRequest(field="speed", boxes_overlay=False), 2, cache={})
    assert off.boxes is None


def test_amr3d_volume_packet_carries_the_tracers_and_their_trails():
    """The default 3D view of a flow draws its tracers inside the volume (with "particles over grids"
    on), and the tracers field itself says its positions are lattice units and leaves parked
    tracers (NaN) out of the colour range."""
    from nagare.app.gui.view3d import length_units
    from nagare.app.gui.worker import ViewRequest, snapshot

    eng = _engine("amr3d-sphere-re20")
    eng.step(6)
    pk = snapshot(eng, ViewRequest(field="speed"), 1, cache={})
    tr = eng.field("tracers")
    assert pk.kind == "volume3d" and pk.overlay is not None and pk.overlay.shape == np.asarray(tr.positions).shape
    np.testing.assert_array_equal(pk.overlay, np.asarray(tr.positions, np.float32))
    assert pk.trails is not None and pk.trails.shape == np.asarray(tr.trails).shape
    off = snapshot(eng, ViewRequest(field="speed", particles_overlay=False), 2, cache={})
    assert off.overlay is None
    # the samples are the lattice's nodes (the far face kept on walled axes): the box is the domain
    assert pk.centering == "node"
    np.testing.assert_allclose(pk.extent, np.asarray(tr.bounds[1]))
    nz, ny, nx = pk.data.shape
    assert nx * pk.spacing > pk.extent[0]  # n × h overshoots the walled x axis by one sample
    tp = snapshot(eng, ViewRequest(field="tracers"), 3, cache={})
    assert length_units(tp) == "lattice (level 0)" and tp.units == "level-0 steps"
    assert length_units(pk) == "lattice (level 0)"  # the volume's box is in the tracers' units
    placed = np.isfinite(np.asarray(tr.positions)).all(axis=1)
    assert (~placed).any() and placed.any()
    assert float(tp.vmin) == float(np.asarray(tr.attributes["age"])[placed].min())


# ---- 6. what runs on the CPU -----------------------------------------------------------------------------
def test_descriptions_say_what_runs_with_cpu_overrides():
    from nagare.app import presetinfo

    raw = presetinfo.raw_preset("diffusion3d")
    assert presetinfo.cpu_note(raw) == "64³ on CPU"
    d = presetinfo.describe(raw, "numpy")
    assert "256³" not in d and "64³" in d
    assert presetinfo.describe(raw, "cupy") == raw["description"]
    thin = presetinfo.raw_preset("diffusion3d-thin")
    assert presetinfo.cpu_note(thin) == "8×128×128 on CPU"
    cyl = presetinfo.raw_preset("lbm2d-cylinder")
    d = presetinfo.describe(cyl, "numpy")
    assert "Re 150" not in d and "Re 100" in d
    assert presetinfo.cpu_note({"description": "x"}) == ""
    # lists and tables by name only: a body list's repr filled the description box
    sphere = presetinfo.cpu_note(presetinfo.raw_preset("amr3d-sphere-re20"))
    assert sphere.startswith("on CPU: grid.m = 9") and "body" in sphere and "{" not in sphere and "[" not in sphere

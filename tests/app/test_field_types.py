"""A field type the app has never seen goes through snapshot → draw / PNG / export once its
handlers are registered (nothing in the app's dispatch code changes), and the worker asks the
engine for the field on screen only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest


@dataclass
class Profile1D:
    """The toy type: a 1-D line profile (as a compact finite-difference preset would show)."""

    values: Any  # (n,)
    label: str = ""


@dataclass
class Mystery:
    """A field type nobody registered handlers for."""

    data: Any = None


# ---- the toy type's handlers: what its own module would register -------------------------------
def _snapshot(f, ctx):
    return ctx.packet("toy-profile", payload=ctx.xp.asarray(f.values, dtype=ctx.xp.float32).copy())


def _png(f, backend, view, vrange):
    from nagare.app import colormaps

    return colormaps.apply(backend.asnumpy(f.values)[None].astype(np.float64), view.colormap, vrange)


def _host_copy(f, asnumpy):
    return Profile1D(asnumpy(f.values), f.label)


def _arrays(out, name, f, asnumpy):
    out[name] = asnumpy(f.values)


def _vtk(name, f):
    from nagare.app.fieldkinds.vtkio import be_bytes

    n = len(f.values)
    head = [b"DATASET STRUCTURED_POINTS", f"DIMENSIONS {n} 1 1".encode(), b"ORIGIN 0 0 0", b"SPACING 1 1 1",
            f"POINT_DATA {n}".encode(), f"SCALARS {name} float 1".encode(), b"LOOKUP_TABLE default"]
    return head, [be_bytes(f.values)]


def _drawer():
    from nagare.app.gui.canvas import Drawer, host
    from vispy import scene

    class ProfileDrawer(Drawer):
        visuals = ("profile",)

        def setup(self, canvas):
            if "profile" not in canvas.visuals:
                canvas.add_visual("profile", scene.visuals.Line(color=(1, 1, 1, 1), width=3))

        def upload(self, canvas, pk):
            v = host(pk.payload, pk.backend)
            canvas.visuals["profile"].set_data(np.stack([np.arange(len(v)), v], axis=1).astype(np.float32))

        def fit(self, canvas, pk):
            v = host(pk.payload, pk.backend)
            canvas.fit_bounds(np.array([0.0, v.min()]), np.array([len(v) - 1.0, v.max()]))

    return ProfileDrawer()


@pytest.fixture
def profile_type():
    from nagare.app import fieldkinds

    handlers = {"snapshot": _snapshot, "png": _png, "host_copy": _host_copy, "arrays": _arrays, "vtk": _vtk}
    for role, fn in handlers.items():
        fieldkinds.register(role, Profile1D, fn)
    yield Profile1D
    for role in handlers:
        fieldkinds.unregister(role, Profile1D)
    # a kind of its own: the app's compact family draws the real "profile1d" kind, which a test
    # that unregistered it on the way out took from every later test (test_window's compact presets)
    if "toy-profile" in fieldkinds.registered("draw"):
        fieldkinds.unregister("draw", "toy-profile")


@pytest.fixture
def toy_engine(fake_preset, fake_family):
    """The fake engine with a line profile and (when asked) a field of an unregistered type; it
    records which fields the app asks for."""
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    class ToyEngine(fake_family.FakeEngine):
        mystery = False

        def __init__(self, *a, **kw):
            self.asked: list[str] = []
            self.all_fields_calls = 0
            super().__init__(*a, **kw)

        def fields(self):
            self.all_fields_calls += 1
            out = dict(super().fields())
            out["profile"] = Profile1D(self.rho[self.rho.shape[0] // 3], label="rho at y = ny/3")
            if self.mystery:
                out["odd"] = Mystery()
            return out

        def field_names(self):
            return ["rho", "u", "tracers", "tree", "profile"] + (["odd"] if self.mystery else [])

        def field(self, name):  # one field without computing the others (as lbm2d does)
            self.asked.append(name)
            if name == "profile":
                return Profile1D(self.rho[self.rho.shape[0] // 3], label="rho at y = ny/3")
            if name == "odd":
                return Mystery()
            return super().fields()[name]  # FakeEngine's: not counted, it stands for a per-field path

    eng = ToyEngine(load_preset(fake_preset(), backend="numpy"), get_backend("numpy"))
    eng.step(3)
    return eng


def test_a_new_field_type_snapshots_draws_pngs_and_exports(profile_type, toy_engine, tmp_path):
    from nagare.app.frames import field_image
    from nagare.app.gui.export import host_copies, read_vtk_structured_points, write_vtk
    from nagare.app.gui.worker import ViewRequest, snapshot
    from nagare.app.headless import dump_fields

    eng = toy_engine
    expected = np.array(eng.rho[eng.rho.shape[0] // 3], dtype=np.float32)

    pk = snapshot(eng, ViewRequest(field="profile"), 1, {})
    assert pk.kind == "toy-profile" and pk.field_name == "profile"
    assert pk.fields == ("rho", "u", "tracers", "tree", "profile")
    np.testing.assert_allclose(pk.payload, expected)
    assert not np.shares_memory(pk.payload, eng.rho), "a packet holds a snapshot, never live state"

    img = field_image(eng, "profile", vrange=(-1.0, 1.0))
    assert img.dtype == np.uint8 and img.shape == (1, eng.rho.shape[1], 3)

    paths = {p.stem.split("_", 1)[1]: p for p in write_vtk(host_copies(eng), tmp_path, "t")}
    assert set(paths) == {"rho", "u", "tracers", "tree", "profile"}
    dims, values = read_vtk_structured_points(paths["profile"])
    assert dims == (len(expected), 1, 1)
    np.testing.assert_allclose(values.reshape(-1), expected)

    dump = np.load(dump_fields(eng, tmp_path / "dump.npz"))
    np.testing.assert_allclose(dump["profile"], expected)
    np.testing.assert_allclose(dump["rho"], eng.rho)  # the built-in types are untouched


def test_worker_asks_for_the_field_on_screen_only(toy_engine):
    from nagare.app.gui.worker import ViewRequest, snapshot

    eng = toy_engine
    cache: dict = {}
    snapshot(eng, ViewRequest(field="rho"), 1, cache)  # finds the tracers for the overlay once
    eng.asked.clear()
    pk = snapshot(eng, ViewRequest(field="rho"), 2, cache)
    assert eng.asked == ["rho", "tracers"] and eng.all_fields_calls == 0
    np.testing.assert_allclose(pk.overlay, eng.pos)
    eng.asked.clear()
    pk = snapshot(eng, ViewRequest(field="rho", particles_overlay=False), 3, cache)
    assert eng.asked == ["rho"] and pk.overlay is None
    eng.asked.clear()
    snapshot(eng, ViewRequest(field="tree"), 4, cache)
    assert eng.asked == ["tree"] and eng.all_fields_calls == 0


def test_an_unregistered_field_type_is_one_clear_error(profile_type, toy_engine):
    from nagare.app.fieldkinds import FieldTypeError
    from nagare.app.frames import field_image
    from nagare.app.gui.export import ExportError, vtk_bytes
    from nagare.app.gui.worker import ViewRequest, snapshot
    from nagare.app.headless import npz_arrays

    eng = toy_engine
    eng.mystery = True
    with pytest.raises(FieldTypeError, match=r"no 'snapshot' handler for field type .*Mystery"):
        snapshot(eng, ViewRequest(field="odd"), 1)
    with pytest.raises(FieldTypeError, match=r"no 'png' handler for field type .*Mystery"):
        field_image(eng, "odd")
    with pytest.raises(ExportError, match=r"field 'odd' cannot be written as VTK: no 'vtk' handler .*Mystery"):
        vtk_bytes("odd", Mystery())
    with pytest.raises(FieldTypeError, match="Mystery"):
        npz_arrays(eng)


def test_registry_rejects_a_wrong_key_or_role():
    from nagare.app import fieldkinds

    with pytest.raises(ValueError, match="unknown field handler role"):
        fieldkinds.register("paint", Profile1D, _png)
    with pytest.raises(TypeError, match="keyed by a packet kind"):
        fieldkinds.register("draw", Profile1D, object())
    with pytest.raises(TypeError, match="keyed by a field type"):
        fieldkinds.register("png", "toy-profile", _png)
    with pytest.raises(fieldkinds.FieldTypeError, match="no 'draw' handler for packet kind nope"):
        fieldkinds.lookup("draw", "nope")


def test_unknown_command_is_an_error_notice(fake_preset):
    import time

    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    w = SimulationWorker(load_preset(fake_preset(), backend="numpy"), "numpy").start()
    try:
        w.send("nonsense")
        t0 = time.perf_counter()
        notes: list = []
        while not any(n.kind == "error" for n in notes) and time.perf_counter() - t0 < 10:
            notes += w.drain_notices()
            time.sleep(0.01)
        assert any(n.kind == "error" and "unknown command 'nonsense'" in n.text for n in notes)
        engine_notes = [n for n in notes if n.kind == "engine"]
        assert engine_notes and isinstance(engine_notes[0].payload, dict)  # the variant table, not the engine
        assert engine_notes[0].payload["kernel"]["current"] == "roll"
    finally:
        w.stop()


@pytest.mark.gui
def test_a_new_field_type_draws_on_the_canvas(profile_type, toy_engine, _vispy_on_qt, qtbot):
    from nagare.app import fieldkinds
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.worker import ViewRequest, snapshot

    fieldkinds.register("draw", "toy-profile", _drawer())
    # no colour bar or axes: VisPy text drawn in the test process destabilises Mesa for later GL
    # tests (tests/app/test_view3d.py, _CANVAS_ISOLATION); this test is about the drawer
    c = FieldCanvas(size=(200, 150), show=False, colorbar=False, axes=False)
    c.show()
    qtbot.waitExposed(c.native)
    try:
        c.show_packet(snapshot(toy_engine, ViewRequest(field="rho"), 1))
        c.draw_now(finish=True)
        assert c.image.visible and "profile" not in c.visuals
        pk = snapshot(toy_engine, ViewRequest(field="profile"), 2)
        c.show_packet(pk)
        img = c.grab()
        assert c.shown is pk and c.visuals["profile"].visible and not c.image.visible
        assert c.display_label == "host (geometry)"
        assert np.any(img != img[0, 0], axis=-1).sum() > 50, "the profile line must be drawn"
    finally:
        c.close()

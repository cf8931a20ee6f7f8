"""While a new preset is built, the old engine's variant controls (the Variants dock, the HUD's
quick toggles) and its timings are gone at once; a variant chosen then is not sent (the worker would
apply it after the build, to the new engine); the new engine's controls come with its "engine"
notice, and a build that fails gives the old run's back. The build is held open by a gate on the
fake engine's allocation (a slow build)."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("PyQt6", reason="the window needs PyQt6 (the GPU machine has none)")

pytestmark = pytest.mark.gui


@pytest.fixture
def gates():
    """Gates a test holds builds with, all opened when it ends (a failed test leaves no build
    waiting: the window's worker must stop). Ask for it after make_window: torn down first."""
    made: list[threading.Event] = []
    yield made
    for g in made:
        g.set()


def _held_build(monkeypatch, fake_family, gates, fail: bool = False) -> threading.Event:
    """The fake engine's next builds wait for the returned gate (and then raise when ``fail``)."""
    gate = threading.Event()
    gates.append(gate)
    allocate = fake_family.FakeEngine._allocate

    def held(self):
        assert gate.wait(30), "the test never opened the gate"
        if fail:
            raise RuntimeError("cannot allocate the fake grid")
        allocate(self)

    monkeypatch.setattr(fake_family.FakeEngine, "_allocate", held)
    return gate


def _sent(monkeypatch, w) -> list[str]:
    kinds = []
    send = w.worker.send
    monkeypatch.setattr(w.worker, "send", lambda kind, **a: (kinds.append(kind), send(kind, **a)))
    return kinds


def test_variant_controls_go_while_a_preset_is_built_and_come_back_for_the_new_engine(
        make_window, gates, qtbot, fake_preset, fake_family, monkeypatch):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos and w.canvas.shown is not None, timeout=10000)
    qtbot.waitUntil(lambda: len(w._hud_model()[0]) > 0, timeout=10000)  # the old engine's timings on show
    gate = _held_build(monkeypatch, fake_family, gates)
    sent = _sent(monkeypatch, w)
    assert w.open_preset(fake_preset("wider", "[grid]\nnx = 80\n"))
    # at once, before any notice of the build: no controls for the engine that is going away
    assert w.building and w.variant_combos == {} and w.variant_info == {}
    assert not w.variants_host.isEnabled()
    assert w.variants_form.rowCount() == 1 and "building wider" in w.variants_form.itemAt(0).widget().text()
    history, variants, status = w._hud_model()  # what the HUD draws: no rows, no timings
    assert history == [] and variants == {} and status == "building wider"
    assert w._hud_quantities() == (-1, [])
    # a click now (the HUD's toggle and the dock call set_variant) sends nothing and says why
    w.set_variant("kernel", "slices")
    assert "variant" not in sent
    assert w.messages[-1].startswith("variant kernel = slices not switched: wider is being built")
    qtbot.wait(300)  # the UI ticks through the build's progress notices: still nothing to click
    assert w.building and w.variant_combos == {}
    assert w.status_labels["steps"].text() == "building wider"
    gate.set()
    qtbot.waitUntil(lambda: not w.building and "kernel" in w.variant_combos, timeout=10000)
    assert w.variants_host.isEnabled() and w.variants_form.rowCount() == len(w.variant_info)
    assert w.worker.engine.preset.grid.nx == 80  # the new engine's controls
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.data.shape == (48, 80), timeout=10000)
    assert w.worker.engine.selection["kernel"] == "roll"  # the click during the build never reached it
    assert w.variant_combos["kernel"].currentText() == "roll"
    # and the controls work again
    w.set_variant("kernel", "slices")
    qtbot.waitUntil(lambda: w.variant_combos["kernel"].currentText() == "slices", timeout=5000)
    assert w.worker.engine.selection["kernel"] == "slices"


def test_a_build_that_fails_gives_the_old_runs_variant_controls_back(make_window, gates, qtbot, fake_preset,
                                                                     fake_family, monkeypatch):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=10000)
    w.set_variant("kernel", "slices")
    qtbot.waitUntil(lambda: w.variant_combos["kernel"].currentText() == "slices", timeout=5000)
    old_engine = w.worker.engine
    gate = _held_build(monkeypatch, fake_family, gates, fail=True)
    assert w.apply_parameters()  # the same family rebuilt: a click would have switched the new engine
    assert w.building and w.variant_combos == {}
    gate.set()
    qtbot.waitUntil(lambda: not w.building, timeout=10000)
    qtbot.waitUntil(lambda: w.last_error_box is not None, timeout=5000)
    assert "cannot allocate the fake grid" in w.last_error_box.text()
    assert w.worker.engine is old_engine and w.variants_host.isEnabled()
    assert set(w.variant_combos) == {"kernel", "layout"}
    assert w.variant_combos["kernel"].currentText() == "slices"  # the old run's table, as it was


def test_an_engine_built_before_the_awaited_one_brings_no_controls(make_window, gates, qtbot, fake_preset,
                                                                   fake_family, monkeypatch):
    """Two switches in a row: the first one's engine is built while the second is awaited; its
    notice brings no controls (a click would reach the second engine)."""
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=10000)
    by_nx = {80: threading.Event(), 96: threading.Event()}
    gates.extend(by_nx.values())
    allocate = fake_family.FakeEngine._allocate

    def held(self):
        assert by_nx[self.preset.grid.nx].wait(30), "the test never opened the gate"
        allocate(self)

    monkeypatch.setattr(fake_family.FakeEngine, "_allocate", held)
    sent = _sent(monkeypatch, w)
    assert w.open_preset(fake_preset("first", "[grid]\nnx = 80\n"))
    assert w.open_preset(fake_preset("second", "[grid]\nnx = 96\n"))
    by_nx[80].set()
    qtbot.waitUntil(lambda: w.worker.engine.preset.grid.nx == 80, timeout=10000)
    qtbot.wait(400)  # the UI ticks through its engine notice
    assert w.building and w.variant_combos == {} and w.variant_info == {}
    w.set_variant("kernel", "slices")
    assert "variant" not in sent
    by_nx[96].set()
    qtbot.waitUntil(lambda: not w.building and "kernel" in w.variant_combos, timeout=10000)
    assert w.worker.engine.preset.grid.nx == 96 and w.worker.engine.selection["kernel"] == "roll"


def test_axes_with_nothing_to_switch_to_here_follow_the_switchable_ones_under_one_reason(
        make_window, qtbot, fake_preset):
    """On the NumPy backend the GPU-only axes (every other choice unavailable) are not mixed with
    the ones a user can switch: they come after a line that says why, greyed."""
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=10000)
    gpu = "needs a CUDA GPU (CuPy backend)"

    def axis(current, **choices):
        return {"current": current, "choices": choices, "doc": "", "live": True}

    w._rebuild_variants({
        "graph": axis("off", off=None, on=gpu),
        "kernel": axis("reference", reference=None, fused=gpu, tiled=None),
        "streaming": axis("two-lattice", **{"two-lattice": None, "aa": gpu}),
        "storage": axis("native", native=None),  # one choice: nothing unavailable, stays first
    })
    form = w.variants_form
    labels = [form.itemAt(i, form.ItemRole.LabelRole).widget().text() if form.itemAt(i, form.ItemRole.LabelRole)
              else form.itemAt(i, form.ItemRole.SpanningRole).widget().text() for i in range(form.rowCount())]
    assert labels == ["kernel", "storage", f"fixed here ({gpu}):", "graph", "streaming"]
    assert w.variant_combos["kernel"].isEnabled() and w.variant_combos["storage"].isEnabled()
    assert not w.variant_combos["graph"].isEnabled() and not w.variant_combos["streaming"].isEnabled()
    assert w.variant_combos["graph"].currentText() == "off"

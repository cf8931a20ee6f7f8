"""The engine contract, exercised on the diffusion3d engine: checkpoints, variants, divergence,
timings, fields."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from nagare.engine import registry
from nagare.engine.backend import get_backend
from nagare.engine.checkpoint import load_checkpoint, save_checkpoint
from nagare.engine.errors import CheckpointError, Diverged, VariantUnavailable
from nagare.engine.families import create_engine
from nagare.engine.fields import Grid3D
from nagare.engine.presets import load_preset

from tests.conftest import backends_param


def small(backend="numpy", **sets):
    overrides = ["grid.nx=24", "grid.ny=20", "grid.nz=16", "initial.kind='random'"]
    overrides += [f"{k}={v}" for k, v in sets.items()]
    return create_engine(load_preset("diffusion3d", overrides, backend=backend), get_backend(backend))


@pytest.mark.parametrize("backend", backends_param())
def test_restore_then_continue_is_bit_identical(backend, tmp_path):
    a = small(backend)
    a.step(7)
    path = save_checkpoint(a.checkpoint(), tmp_path / "c.npz")
    a.step(13)
    b = small(backend)
    b.restore(load_checkpoint(path))
    assert b.step_count == 7
    b.step(13)
    assert (a.step_count, a.time) == (b.step_count, b.time)
    np.testing.assert_array_equal(a.backend.asnumpy(a.f), b.backend.asnumpy(b.f))


@pytest.mark.gpu
def test_checkpoint_moves_between_backends(tmp_path):
    g = small("cupy")
    g.step(5)
    c = small("numpy")
    c.restore(g.checkpoint())
    np.testing.assert_array_equal(c.f, g.backend.asnumpy(g.f))


def test_checkpoint_of_another_shape_is_refused(tmp_path):
    a = small()
    b = create_engine(load_preset("diffusion3d", ["grid.nx=12"], backend="numpy"), get_backend("numpy"))
    with pytest.raises(CheckpointError, match="shape"):
        b.restore(a.checkpoint())


def test_broken_checkpoint_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a nagare checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.npz")


def test_a_text_file_as_checkpoint_is_not_called_pickled_data(tmp_path):
    """np.load takes a file that is neither .npz nor .npy for a pickle: its refusal told the user
    to load the file unsafely with allow_pickle."""
    bad = tmp_path / "notes.npz"
    bad.write_text("garbage\n")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad)
    assert str(info.value) == (f"{bad}: not a nagare checkpoint (not an .npz archive: it does not begin as a "
                               "zip file does)")


def test_diagnostics_raise_diverged_on_nan():
    e = small()
    e.step(2)
    e.f[3, 4, 5] = np.nan
    e.step(1)
    with pytest.raises(Diverged, match=r"diffusion3d diverged at step 3: .*not finite"):
        e.diagnostics()


def test_variants_report_availability_with_reasons():
    e = small()
    v = e.variants["kernel"]
    assert v["current"] == "array"
    assert v["choices"]["array"] is None
    assert "CUDA" in v["choices"]["cuda"]
    with pytest.raises(VariantUnavailable, match="kernel=cuda cannot run here: needs a CUDA GPU"):
        e.set_variant(kernel="cuda")
    with pytest.raises(VariantUnavailable, match="unknown variant axis 'warp'"):
        e.set_variant(warp="on")
    assert e.selection == {"kernel": "array"}


@pytest.mark.gpu
def test_set_variant_keeps_state_and_matches_uninterrupted_run():
    a, b = small("cupy", **{"physics.precision": "'fp64'"}), small("cupy", **{"physics.precision": "'fp64'"})
    a.set_variant(kernel="array")
    b.set_variant(kernel="array")
    a.step(10)
    b.step(5)
    b.set_variant(kernel="cuda")
    b.step(5)
    np.testing.assert_allclose(b.backend.asnumpy(b.f), a.backend.asnumpy(a.f), rtol=1e-13, atol=1e-15)


def test_preset_variant_that_cannot_run_falls_back_with_a_log_line(caplog):
    caplog.set_level(logging.INFO, logger="nagare")
    e = create_engine(load_preset("diffusion3d", ["variants.kernel='cuda'"], backend="numpy"), get_backend("numpy"))
    assert e.selection["kernel"] == "array"
    assert "kernel=cuda cannot run here" in caplog.text


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_a_preset_choice_that_conflicts_with_a_default_is_the_one_that_falls_back(backend, caplog):
    """compact-vortex-outflow with a preset default batching = grouped where y-direction defaults to
    strided (both backends): grouped cannot run with strided, and strided — the default — has nothing to
    fall back to, so grouped goes, in one accurate log line; with the preset's own y-direction =
    transpose both stay. Resolution only (no engine is built: runs without a GPU)."""
    caplog.set_level(logging.INFO, logger="nagare")
    pre = load_preset("compact-vortex-outflow", backend=backend)
    sel = registry.resolve_selection("compact", backend, pre, {"batching": "grouped"}, {})
    assert (sel["batching"], sel["y-direction"]) == ("stacked", "strided")
    lines = [r.getMessage() for r in caplog.records if "cannot run here" in r.getMessage()]
    assert lines == [lines[0]] and "batching=grouped cannot run here" in lines[0] and "using stacked" in lines[0]
    sel = registry.resolve_selection("compact", backend, pre, {"batching": "grouped", "y-direction": "transpose"}, {})
    assert (sel["batching"], sel["y-direction"]) == ("grouped", "transpose")
    # a request wins over the preset's defaults it conflicts with (--variant y-direction=strided)
    sel = registry.resolve_selection("compact", backend, pre, {"batching": "grouped", "y-direction": "transpose"},
                                     {"y-direction": "strided"})
    assert (sel["batching"], sel["y-direction"]) == ("stacked", "strided")
    with pytest.raises(VariantUnavailable, match="cannot run here") as exc:  # two requests that clash
        registry.resolve_selection("compact", backend, pre, {}, {"batching": "grouped", "y-direction": "strided"})
    assert "grouped" in str(exc.value) and "strided" in str(exc.value)


def test_explicitly_requested_unavailable_variant_raises():
    with pytest.raises(VariantUnavailable):
        registry.resolve_selection("diffusion3d", "numpy", None, {}, {"kernel": "cuda"})


def test_timings_give_per_phase_time_and_throughput():
    e = small()
    e.step(5)
    rep = e.timings
    assert rep.steps == 5
    assert set(rep.phase_ms_per_step) == {"diffuse"}
    assert rep.ms_per_step > 0
    np.testing.assert_allclose(rep.updates_per_s, 24 * 20 * 16 / (rep.ms_per_step * 1e-3), rtol=1e-12)
    np.testing.assert_allclose(rep.bytes_per_s, rep.updates_per_s * 8, rtol=1e-12)
    assert 0 < rep.roofline_fraction
    batch = e.batch_report()
    assert batch.steps == 5 and e.batch_report().steps == 0  # rows never count a sample twice


def test_fields_are_typed():
    f = small().fields()["f"]
    assert isinstance(f, Grid3D) and f.data.shape == (16, 20, 24)


def test_impossible_size_is_refused_before_allocating(capsys):
    from nagare.app.cli import main

    status = main(["run", "diffusion3d", "--backend", "numpy", "--set", "grid.nx=4096", "--set", "grid.ny=4096",
                   "--set", "grid.nz=4096", "--steps", "1"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert "needs about" in err and "GiB" in err and "reduce the problem size" in err


def test_checkpoint_of_another_precision_is_refused():
    a = small(**{"physics.precision": "'fp64'"})
    with pytest.raises(CheckpointError, match="float64, the running engine float32"):
        small().restore(a.checkpoint())


def test_resumed_preset_keeps_its_source():
    p = load_preset("diffusion3d", backend="numpy")
    q = p.model_copy(update={"variants": {"kernel": "array"}})
    assert q.source == p.source and q.content_hash == p.content_hash


def test_checkpoint_is_a_copy_not_the_live_state():
    e = small()
    ck = e.checkpoint()
    before = ck["arrays"]["f"].copy()
    e.step(3)
    np.testing.assert_array_equal(ck["arrays"]["f"], before)


def test_impossible_lbm2d_size_is_refused_before_allocating(capsys):
    """32768² fp64 D2Q9 needs ~350 GiB at construction: refused up front in one line."""
    from nagare.app.cli import main
    from nagare.engine.lbm2d.engine import LBM2D
    from nagare.engine.presets import load_preset

    p = load_preset("lbm2d-poiseuille", ["grid.nx=32768", "grid.ny=32768", "physics.precision=fp64"], backend=None)
    cpu = SimpleNamespace(is_gpu=False)
    two_lattice = LBM2D.estimated_bytes(SimpleNamespace(preset=p, selection={"streaming": "two-lattice"}, backend=cpu))
    aa = LBM2D.estimated_bytes(SimpleNamespace(preset=p, selection={"streaming": "aa"}, backend=cpu))
    assert two_lattice > 4 * 9 * 8 * 32768 ** 2
    assert aa - two_lattice == 2 * 9 * 8 * 32768 ** 2  # AA's conversion holds two more lattices at its peak
    status = main(["run", "lbm2d-poiseuille", "--backend", "numpy", "--set", "grid.nx=32768", "--set",
                   "grid.ny=32768", "--set", "physics.precision=fp64", "--steps", "1"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert "needs about" in err and "GiB" in err and "reduce the problem size" in err

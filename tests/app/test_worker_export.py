"""The simulation worker and the exporters without a window (no display needed)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tests.app.waiting import wait_until


@pytest.fixture
def worker(fake_preset):
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    w = SimulationWorker(load_preset(fake_preset(), backend="numpy"), "numpy").start()
    wait_until(lambda: w.latest_packet() is not None)
    yield w
    w.stop()
    assert not w.alive


def test_worker_runs_without_any_consumer(worker):
    """Nobody reads the packets: the worker overwrites the mailbox and keeps stepping."""
    worker.send("play")
    wait_until(lambda: worker.engine.step_count > 200)
    seq = worker.latest_packet().seq
    wait_until(lambda: worker.latest_packet().seq > seq + 3)


def test_last_good_checkpoints_are_counted_with_their_time(fake_preset):
    """bench_display reports how many last-good checkpoints fell in its window and what they took."""
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    w = SimulationWorker(load_preset(fake_preset(), backend="numpy"), "numpy", checkpoint_interval=0.05)
    assert (w.checkpoints_taken, w.checkpoint_s) == (0, 0.0)
    w.start()
    try:
        w.send("play")
        wait_until(lambda: w.checkpoints_taken >= 3)
        assert w.last_good is not None and w.checkpoint_s > 0.0
    finally:
        w.stop()


def test_packet_is_a_snapshot_not_live_state(worker):
    worker.send("view", field="rho")
    wait_until(lambda: worker.latest_packet().field_name == "rho")
    pk = worker.latest_packet()
    before = np.array(pk.data, copy=True)
    worker.send("step", n=50)
    wait_until(lambda: worker.engine.step_count >= 50)
    np.testing.assert_array_equal(pk.data, before)
    assert not np.shares_memory(pk.data, worker.engine.rho)


def test_commands_apply_between_steps_in_order(worker):
    worker.send("step", n=7)
    worker.send("variant", axis="kernel", choice="slices")
    worker.send("step", n=5)
    wait_until(lambda: worker.engine.step_count == 12)
    assert worker.engine.selection["kernel"] == "slices"
    kinds = [n.kind for n in worker.drain_notices()]
    assert "variant" in kinds and "error" not in kinds


def test_unavailable_variant_is_an_error_notice(worker):
    worker.drain_notices()
    worker.send("variant", axis="kernel", choice="gpu-only")
    wait_until(lambda: not worker.notices.empty())
    notes = [n for n in worker.drain_notices() if n.kind == "error"]
    assert notes and "needs a CUDA GPU" in notes[0].text
    assert worker.engine.selection["kernel"] == "roll"


def test_vtk_particles_and_boxes_headers(tmp_path, fake_preset):
    from nagare.app.gui.export import host_copies, write_vtk
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    eng = create_engine(load_preset(fake_preset(), backend="numpy"), get_backend("numpy"))
    paths = {p.stem.split("_", 1)[1]: p for p in write_vtk(host_copies(eng), tmp_path, "t")}
    assert set(paths) == {"rho", "u", "tracers", "tree"}
    tracers = paths["tracers"].read_bytes()
    assert b"DATASET POLYDATA\nPOINTS 32 float\n" in tracers and b"VERTICES 32 64" in tracers
    assert b"SCALARS radius float 1" in tracers
    tree = paths["tree"].read_bytes()
    assert b"POINTS 96 float" in tree and b"LINES 48 144" in tree  # 4 boxes × 12 edges
    u = paths["u"].read_bytes()
    assert b"VECTORS u float" in u and b"DIMENSIONS 64 48 1" in u


def test_video_recorder_crops_odd_sizes(tmp_path):
    import imageio.v2 as imageio
    from nagare.app.gui.export import VideoRecorder

    rec = VideoRecorder(tmp_path / "v.mp4", fps=10)
    rng = np.random.default_rng(0)
    for _ in range(5):
        rec.append(rng.integers(0, 255, (101, 133, 4), dtype=np.uint8))
    assert rec.close() == tmp_path / "v.mp4"
    r = imageio.get_reader(tmp_path / "v.mp4")
    assert r.count_frames() == 5 and r.get_data(0).shape == (100, 132, 3)
    r.close()
    assert not list(tmp_path.glob(".*tmp*")), "the temporary file must be gone"


def test_a_killed_recording_leaves_no_temporary_behind(tmp_path):
    """A recording cut by SIGKILL leaves its .NAME.PID.tmp.mp4; the next recording into the folder
    removes it (the engine's temporary naming and cleanup, engine/atomic.py)."""
    from nagare.app.gui.export import VideoRecorder

    dead = tmp_path / ".old.mp4.999999999.tmp.mp4"  # a pid no process has
    dead.write_bytes(b"half a video")
    live = tmp_path / f".mine.mp4.{os.getpid()}.tmp.mp4"  # this process's: kept
    live.write_bytes(b"in progress")
    rec = VideoRecorder(tmp_path / "v.mp4", fps=10)
    assert rec.tmp.name.endswith(".tmp.mp4") and not dead.exists() and live.exists()
    rec.abort()


def test_export_failures_are_one_line_errors(tmp_path):
    from nagare.app.gui.export import ExportError, VideoRecorder, save_png, write_checkpoint

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ExportError, match="cannot write"):
        save_png(np.zeros((4, 4, 3), np.uint8), blocker / "a.png")
    with pytest.raises(ExportError, match="cannot"):
        write_checkpoint({"meta": {}, "arrays": {}}, blocker / "c.npz")
    with pytest.raises(ExportError, match="cannot record"):
        VideoRecorder(blocker / "v.mp4")


def test_display_range_is_robust_to_peaks():
    """A few wall peaks (vorticity at a cylinder) must not set the colour range."""
    from nagare.app.gui.worker import display_range

    rng = np.random.default_rng(3)
    data = rng.normal(0.0, 1.0, (1024, 768)).astype(np.float32)
    data[::97, ::89] = 500.0  # sparse outliers, ~0.01 % of the points
    data[5, 7] = np.nan
    lo, hi = display_range(np, data)
    finite = data[np.isfinite(data)]
    ref_lo, ref_hi = np.percentile(finite, [0.5, 99.5])
    # a 1/16 subsample estimates the 0.5/99.5 percentiles of N(0,1) (±2.58) to about ±0.05
    np.testing.assert_allclose([lo, hi], [ref_lo, ref_hi], atol=0.08)
    assert hi < 5.0


def test_snapshots_share_the_copy_of_an_unchanged_mask(fake_preset):
    """One mask copy per engine mask object: the UI then uploads the obstacle texture once."""
    from nagare.app.gui.worker import ViewRequest, snapshot
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    eng = create_engine(load_preset(fake_preset(), backend="numpy"), get_backend("numpy"))
    cache: dict = {}
    a = snapshot(eng, ViewRequest(field="rho"), 1, cache)
    eng.step(3)
    b = snapshot(eng, ViewRequest(field="rho"), 2, cache)
    assert b.mask is a.mask and a.data is not b.data
    np.testing.assert_array_equal(a.mask, eng.fields()["rho"].mask)
    a.mask[...] = False  # a copy: the engine's mask is untouched
    assert eng.fields()["rho"].mask.any()
    eng.mask = eng.mask.copy()  # a new mask object (moved obstacles): a new copy
    c = snapshot(eng, ViewRequest(field="rho"), 3, cache)
    assert c.mask is not b.mask and c.mask.any()
    assert snapshot(eng, ViewRequest(field="rho"), 4).mask is not c.mask  # no cache: always a copy


def test_percentiles_match_numpy():
    from nagare.app.gui.worker import _percentiles

    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000, 65536):
        a = rng.standard_normal(n).astype(np.float32)
        got = [float(v) for v in _percentiles(np, a, (0.5, 50.0, 99.5))]
        np.testing.assert_allclose(got, np.percentile(a.astype(np.float64), [0.5, 50.0, 99.5]), rtol=1e-6, atol=1e-6)


def test_a_test_problem_pauses_once_at_its_end():
    """run.pause_at_end (the compact test problems): the app's run stops at run.steps exactly, says
    so, and runs on when played again."""
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    p = load_preset("compact-advection1d", ["run.steps=23", "run.steps_per_frame=5"], backend="numpy")
    assert p.run.pause_at_end
    w = SimulationWorker(p, "numpy").start()
    try:
        wait_until(lambda: w.latest_packet() is not None)
        w.send("play")
        wait_until(lambda: w.engine.step_count >= 23 and not w.running)
        time.sleep(0.2)
        assert w.engine.step_count == 23
        notes = [n.text for n in w.drain_notices()]
        assert any("paused at the preset's end: step 23" in t for t in notes), notes
        w.send("play")
        wait_until(lambda: w.engine.step_count > 40)
    finally:
        w.stop()


def test_a_choice_that_needs_another_is_switched_with_it():
    """compact's batching = grouped needs y-direction = transpose (strided is the default on both
    backends): the variant table offers grouped with that companion, and the worker switches both,
    saying so — instead of a disabled choice the user must first unlock by hand."""
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    pre = load_preset("compact-vortex-outflow", ["grid.nx=24", "grid.ny=24", "physics.dt=0.01"], backend="numpy")
    w = SimulationWorker(pre, "numpy").start()
    try:
        wait_until(lambda: w.latest_packet() is not None)
        info = w.engine.variants["batching"]
        assert info["choices"]["grouped"] is None and info["companions"] == {"grouped": {"y-direction": "transpose"}}
        w.drain_notices()
        w.send("variant", axis="batching", choice="grouped")
        w.send("step", n=2)
        wait_until(lambda: w.engine.step_count >= 2)
        assert (w.engine.selection["batching"], w.engine.selection["y-direction"]) == ("grouped", "transpose")
        notes = w.drain_notices()
        assert not [n for n in notes if n.kind == "error"]
        said = [n.text for n in notes if n.kind == "variant"]
        assert said == ["batching = grouped, with y-direction = transpose (which it needs)"]
    finally:
        w.stop()


def test_a_live_variant_switch_closes_the_timing_row_of_the_old_choice(worker):
    """The samples before a live switch are written as a row labelled with the old variant, so no
    timing-log row mixes two variants' phases."""
    worker.send("step", n=7)
    wait_until(lambda: worker.engine.step_count == 7)
    rows_before = worker.timing_log.count
    worker.send("variant", axis="kernel", choice="slices")
    wait_until(lambda: worker.engine.selection["kernel"] == "slices")
    wait_until(lambda: worker.timing_log.count > rows_before)
    assert "kernel=roll" in worker.timing_log.last_row["variant"]
    assert worker.timing_log.last_row["step"] == 7


def test_a_paced_run_advances_its_steps_a_frame_at_the_frame_rate():
    """Run ▸ Speed (the worker's frame_steps, run.paced): every published frame is exactly N steps
    after the last, at most a frame interval's rate, so a fast solver is watched at N × the cap steps a
    second; "as fast as it runs" lifts the limit; a preset with run.paced starts paced."""
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    p = load_preset("wave2d", ["grid.nx=32", "grid.ny=32", "run.steps_per_frame=3"], backend="numpy")
    assert p.run.paced
    w = SimulationWorker(p, "numpy", display_interval=0.05).start()
    try:
        wait_until(lambda: w.latest_packet() is not None)
        assert w.frame_steps == 3
        notes = w.drain_notices()
        assert [n.payload for n in notes if n.kind == "speed"] == [3]
        w.send("play")
        # every published packet, by its number (a poll that oversleeps on a loaded machine still sees
        # them all through packets_after; a packet the ring dropped shows as a gap in the numbers)
        first = w.latest_packet()
        seen = [(first.seq, first.step)]
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            seen += [(pk.seq, pk.step) for pk in w.packets_after(seen[-1][0])]
            time.sleep(0.005)
        rate = (w.engine.step_count - seen[0][1]) / (time.perf_counter() - t0)
        seqs, steps = (np.diff([x[i] for x in seen[1:]]) for i in (0, 1))
        assert len(steps) >= 5 and (steps == 3 * seqs).all(), seen  # every frame 3 steps after the last
        assert rate <= 1.2 * 3 / 0.05, rate  # at most 60 steps/s at 20 frames/s (a 32² wave runs thousands)
        w.send("speed", steps=None)
        wait_until(lambda: w.engine.step_count > seen[-1][1] + 1000)  # unpaced: as fast as it runs
        for bad in (0, 2.5, float("nan"), True):  # one line each, the speed kept
            w.send("speed", steps=bad)
            wait_until(lambda: any(n.kind == "error" and "speed: steps a frame" in n.text for n in w.drain_notices()))
        assert w.frame_steps is None
        # a reset (and any rebuild of the same preset) keeps the user's speed; another preset brings its own
        w.send("speed", steps=7)
        w.send("reset")
        wait_until(lambda: any("reset" in n.text for n in w.drain_notices()))
        assert w.frame_steps == 7
        w.send("preset", preset=load_preset("lbm2d-cavity", ["grid.n=16"], backend="numpy"))
        wait_until(lambda: w.frame_steps is None)
    finally:
        w.stop()

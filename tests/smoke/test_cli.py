"""The headless CLI end to end on NumPy: outputs, resume, Ctrl-C, the no-display default run."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from nagare.app.cli import main
from PIL import Image

SMALL = ["--set", "grid.nx=24", "--set", "grid.ny=16", "--set", "grid.nz=12", "--backend", "numpy"]


def test_run_writes_timings_dump_frames(tmp_path, capsys):
    status = main(["run", "diffusion3d", "--steps", "50", "--timings", str(tmp_path / "t.csv"),
                   "--dump", str(tmp_path / "d.npz"), "--frames", str(tmp_path / "fr"), "--every", "25", *SMALL])
    assert status == 0
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert rows and set(rows[0]) == {"wall_time", "step", "time", "steps_measured", "engine", "variant",
                                     "phase_diffuse_ms", "ms_per_step", "updates_per_s", "gbytes_per_s", "roofline_pct"}
    assert sum(int(r["steps_measured"]) for r in rows) == 50
    # the simulated time of each row's step (diffusion3d's Δt is 0.1 at this size)
    np.testing.assert_allclose([float(r["time"]) for r in rows], [0.1 * int(r["step"]) for r in rows], rtol=1e-12)
    assert rows[-1]["engine"] == "diffusion3d" and rows[-1]["variant"] == "kernel=array"
    meta = json.load(open(tmp_path / "t.json"))["metadata"]
    for key in ("device", "numpy", "preset_hash", "command_line", "roofline_bytes_per_s", "time_units"):
        assert key in meta
    d = np.load(tmp_path / "d.npz")
    assert d["f"].shape == (12, 16, 24) and int(d["step"]) == 50
    np.testing.assert_allclose(float(d["time"]), 50 * 0.1)
    pngs = sorted((tmp_path / "fr").glob("*.png"))
    assert [p.name for p in pngs] == ["frame_00000000.png", "frame_00000025.png", "frame_00000050.png"]
    img = np.asarray(Image.open(pngs[-1]))
    assert img.ndim == 3 and max(img.shape[:2]) >= 512 and img.std() > 1  # not uniform


def test_frames_with_legend_carry_the_colour_bar_and_axes(tmp_path):
    """--legend: each frame of a grid field gets the colour-bar column beside the same field pixels
    (the bar's top row is the colormap's high end, its bottom row the low end; label text drawn)
    and the window's axes: tick marks under and left of the field at the round world coordinates
    app/gui/ticks.py picks (cells of the 24 × 16 z slice), with labels and titles."""
    from nagare.app import colormaps, frames
    from nagare.app.gui.ticks import nice_ticks

    args = ["run", "diffusion3d", "--steps", "10", "--quiet", "--every", "10", *SMALL]
    assert main([*args, "--frames", str(tmp_path / "plain")]) == 0
    assert main([*args, "--frames", str(tmp_path / "legend"), "--legend"]) == 0
    plain = np.asarray(Image.open(tmp_path / "plain" / "frame_00000010.png"))
    framed = np.asarray(Image.open(tmp_path / "legend" / "frame_00000010.png"))
    h, w = plain.shape[:2]
    left, right = frames.AXIS_LEFT, frames.AXIS_LEFT + w
    top = frames.AXIS_TOP
    assert framed.shape == (top + h + frames.AXIS_BOTTOM, right + frames.AXIS_RIGHT + frames.LEGEND_WIDTH, 3)
    # the top y label (centred on the field's first row) is drawn whole: nothing on the frame's edge row
    assert not (framed[0] != frames.LEGEND_BG).any()
    assert top >= 8
    framed = framed[top:]  # below: coordinates from the field's first row
    np.testing.assert_array_equal(framed[:h, left:right], plain)  # the field itself is untouched
    panel = framed[:h, right + frames.AXIS_RIGHT:]
    bar = panel[:, 8:26]
    column = bar[:, 9].astype(int)
    inside = np.flatnonzero((column != frames.LEGEND_BG).any(axis=1))
    from nagare.engine.presets import load_preset

    cmap = load_preset("diffusion3d").view.colormap
    table = (np.asarray(colormaps.lut(cmap)) * 255 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(column[inside[0]], table[-1])  # top: the high end
    np.testing.assert_array_equal(column[inside[-1]], table[0])  # bottom: the low end
    label_area = panel[: inside[0], :]  # the label and units above the bar
    assert (label_area != frames.LEGEND_BG).any(axis=2).sum() > 20
    ticks_area = panel[inside[0]:inside[-1], 26:]  # tick marks and values right of the bar
    assert (ticks_area != frames.LEGEND_BG).any(axis=2).sum() > 20
    ink = (framed != frames.LEGEND_BG).any(axis=2)
    xs, _ = nice_ticks(0.0, 24.0, w, frames.LEGEND_PT, frames.LEGEND_DPI, along="x")
    ys, _ = nice_ticks(0.0, 16.0, h, frames.LEGEND_PT, frames.LEGEND_DPI, along="y")
    assert len(xs) >= 3 and len(ys) >= 3
    for v in xs:  # an x tick: a vertical mark under the field at its column
        c = int(round(left + v / 24.0 * (w - 1)))
        assert ink[h + 1:h + frames.TICK_LEN, c].all(), v
    for v in ys:  # a y tick: a horizontal mark left of the field at its row (y up)
        r = int(round((16.0 - v) / 16.0 * (h - 1)))
        assert ink[r, left - frames.TICK_LEN:left - 1].all(), v
    between = int(round(left + (xs[0] + xs[1]) / 2 / 24.0 * (w - 1)))  # no mark between two ticks
    assert not ink[h + 2:h + frames.TICK_LEN, between].any()
    assert ink[h + frames.TICK_LEN + 2:, left:right].sum() > 50  # labels and the title "x [cells]"
    assert ink[:h, :left - frames.TICK_LEN - 2].sum() > 50  # labels and the title "y [cells]"


def test_dump_every_writes_a_series(tmp_path):
    assert main(["run", "diffusion3d", "--steps", "20", "--dump-every", "5", "--dump-dir", str(tmp_path), "--quiet",
                 *SMALL]) == 0
    steps = [int(np.load(p)["step"]) for p in sorted(tmp_path.glob("*.npz"))]
    assert steps == [5, 10, 15, 20]


def test_a_checkpoint_from_before_a_new_preset_key_still_resumes(tmp_path):
    """A key added to a family's preset model later (amr3d's flow.lift, default None) is absent from
    older checkpoints' stored presets: they still resume, with their own preset and by name, while a
    real change (--set) is still refused."""
    from nagare.engine.checkpoint import load_checkpoint, save_checkpoint

    small = ["--set", "grid.m=9", "--set", "refine=[]", "--set", "tracers.count=0", "--backend", "numpy", "--set",
             "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level=1, band=0.5}]"]
    ck, old = tmp_path / "c.npz", tmp_path / "old.npz"
    assert main(["run", "amr3d-sphere-re20", "--steps", "2", "--checkpoint", str(ck), "--quiet", *small]) == 0
    c = load_checkpoint(ck)
    del c["meta"]["preset"]["flow"]["lift"]  # as written before flow.lift existed
    save_checkpoint(c, old)
    assert main(["run", "-", "--resume", str(old), "--steps", "2", "--quiet", "--backend", "numpy"]) == 0
    assert main(["run", "amr3d-sphere-re20", "--resume", str(old), "--steps", "2", "--quiet", *small]) == 0
    assert main(["run", "amr3d-sphere-re20", "--resume", str(old), "--steps", "2", "--quiet", *small,
                 "--set", "flow.velocity=[0.04, 0.0, 0.0]"]) == 2


def test_resume_equals_uninterrupted_run(tmp_path):
    full, part, ck = tmp_path / "full.npz", tmp_path / "part.npz", tmp_path / "c.npz"
    assert main(["run", "diffusion3d", "--steps", "30", "--dump", str(full), "--quiet", *SMALL]) == 0
    assert main(["run", "diffusion3d", "--steps", "12", "--checkpoint", str(ck), "--quiet", *SMALL]) == 0
    assert main(["run", "diffusion3d", "--steps", "18", "--resume", str(ck), "--dump", str(part), "--quiet",
                 *SMALL]) == 0
    a, b = np.load(full), np.load(part)
    assert int(b["step"]) == 30
    np.testing.assert_array_equal(a["f"], b["f"])


def test_bad_option_values_are_one_line(capsys):
    assert main(["run", "diffusion3d", "--steps", "0", "--backend", "numpy"]) == 2
    assert main(["run", "diffusion3d", "--dump-every", "5", "--backend", "numpy"]) == 2
    assert main(["run", "diffusion3d", "--variant", "kernel=cuda", "--backend", "numpy", *SMALL]) == 2
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("nagare: ") for line in err)
    assert "kernel=cuda cannot run here: needs a CUDA GPU" in err[2]


@pytest.mark.parametrize("preset,said", [("compact-advection1d", "a 1D problem has no y-lines"),
                                         ("compact-derivative", "differentiates along x")])
def test_a_variant_with_nothing_to_act_on_is_refused(capsys, preset, said):
    """A choice that would be accepted and do nothing (transposing the y-lines of a problem without any)
    is refused in one line that says why; the same preset along y takes it."""
    assert main(["run", preset, "--steps", "2", "--variant", "y-direction=transpose", "--backend", "numpy",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "y-direction=transpose cannot run here" in err[0] and said in err[0]
    if preset == "compact-derivative":
        assert main(["run", preset, "--steps", "2", "--variant", "y-direction=transpose", "--backend", "numpy",
                     "--quiet", "--set", 'physics.direction="y"']) == 0


def test_a_frames_folder_lost_while_running_does_not_stop_the_run(tmp_path, capsys, monkeypatch):
    """The folder was fine at the start (else the run is refused: below) and becomes a file after
    the first frame: every later frame fails, said once, summed up, and the run goes on."""
    from nagare.app import headless

    folder, real = tmp_path / "frames", headless.frames.save_frame

    def save_then_lose_the_folder(engine, path, *a):
        out = real(engine, path, *a)
        if folder.is_dir():
            for p in folder.iterdir():
                p.unlink()
            folder.rmdir()
            folder.write_text("x")  # a file where the folder was
        return out

    monkeypatch.setattr(headless.frames, "save_frame", save_then_lose_the_folder)
    assert main(["run", "diffusion3d", "--steps", "10", "--frames", str(folder), "--every", "5",
                 "--dump", str(tmp_path / "d.npz"), "--quiet", *SMALL]) == 4  # ran, but frames are missing
    err = capsys.readouterr().err
    assert "frame not written: cannot write" in err and "is a file, not a folder" in err
    assert err.count("frame not written") == 1  # the same failure is said once, then summed up
    assert "NOT WRITTEN: frame at steps 5, 10" in err
    assert int(np.load(tmp_path / "d.npz")["step"]) == 10  # the run went on


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, ""), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupt_stops_cleanly_and_writes_log_and_checkpoint(tmp_path, sig, code, said):
    """Ctrl-C, and SIGTERM (timeout, systemd, containers, batch schedulers), stop after the current
    batch and still write the timing log and a checkpoint."""
    proc = subprocess.Popen([sys.executable, "-m", "nagare.app.cli", "run", "diffusion3d", "--steps", "1000000",
                             "--timings", "t.csv", "--batch", "5", *SMALL], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and said in err
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    ck = list(tmp_path.glob("diffusion3d-interrupted-step*.ckpt.npz"))
    assert len(ck) == 1 and rows
    step = int(ck[0].name.split("step")[1].split(".")[0])
    assert step > 0 and step % 5 == 0  # stopped after a whole batch
    assert int(rows[-1]["step"]) == step
    assert json.load(open(tmp_path / "t.json"))["rows"][-1]["step"] == step


def test_no_display_in_a_folder_that_takes_no_files_says_where_to_go(tmp_path, monkeypatch, capsys):
    """Bare `nagare` without a display writes into ./nagare-output: where it cannot, one line says so
    before anything runs (not an error about a --timings option the user never typed)."""
    from nagare.app import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
    assert cli.headless_default("numpy") == 2
    err = capsys.readouterr().err
    assert "not writable" in err and "cd to a writable folder" in err and "--timings" not in err
    assert err.count("\n") == 1 and not (tmp_path / "nagare-output").exists()

def test_quiet_prints_nothing_when_all_goes_well(tmp_path):
    """--quiet: errors only — no progress, no summary, and no notes through logging such as the NumPy
    fallback of the default backend (where CuPy is missing) — so a script's output is its own."""
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "compact-advection1d", "--steps", "5",
                           "--quiet"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")


def test_no_display_runs_the_default_preset_headless(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "no display found" in proc.stdout and "Output in" in proc.stdout
    out = next((tmp_path / "nagare-output").iterdir())
    assert len(list((out / "frames").glob("*.png"))) >= 6
    assert (out / "timings.csv").exists() and (out / "timings.json").exists() and (out / "fields.npz").exists()


def test_presets_and_info_commands(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "diffusion3d " in out and "thin 8×512×512" in out
    assert main(["info", "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "backend:   numpy" in out and "bandwidth:" in out and "GB/s" in out


def test_bench_writes_table_json_markdown_plot(tmp_path, capsys):
    assert main(["bench", "diffusion3d", "--backend", "numpy", "--out", str(tmp_path), "--case", "32x32x32",
                 "--min-time", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "32x32x32" in out and "cannot run" in out and "needs a CUDA GPU" in out
    data = json.load(open(tmp_path / "diffusion3d.json"))
    assert data["metadata"]["device"]["name"] and data["results"][0]["ok"] and data["metadata"]["complete"]
    assert data["results"][0]["roofline_pct"] > 0
    assert (tmp_path / "diffusion3d.md").read_text().startswith("# nagare bench diffusion3d")
    assert Image.open(tmp_path / "diffusion3d-roofline.png").size[0] > 100
    assert "an update" not in out  # a grid point a step: the column says what it is


def test_bench_says_what_an_update_is_where_it_is_not_a_point(tmp_path, capsys):
    """compact's M updates/s counts line systems in the derivative cases: the table and its Markdown
    say so (a reader would take them for grid points)."""
    assert main(["bench", "compact", "--backend", "numpy", "--out", str(tmp_path), "--case", "128x128-x-fp64",
                 "--only", "default", "--min-time", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "an update (M updates/s) is one tridiagonal system" in out
    assert "- an update (M updates/s) is one tridiagonal system" in (tmp_path / "compact.md").read_text()


def test_bench_amr3d_prints_the_distinct_counts(tmp_path, capsys):
    """amr3d's own tables follow the generic one on the console and in the Markdown: the box of
    2×2×2 leaves of 17³ stores 39,304 points for 32,768 distinct nodes."""
    assert main(["bench", "amr3d", "--backend", "numpy", "--out", str(tmp_path), "--case", "p0-box-8-leaves",
                 "--min-time", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "## Distinct nodes and P0's break-even" in out
    assert "## Distinct nodes and P0's break-even" in (tmp_path / "amr3d.md").read_text()
    r = json.load(open(tmp_path / "amr3d.json"))["results"][0]
    assert r["extra"]["distinct_updates_per_step"] == 32**3 and r["updates_per_s"] * r["ms_per_step"] * 1e-3 == (
        pytest.approx(8 * 17**3))


def test_bench_keeps_measured_cells_when_stopped(tmp_path, monkeypatch, capsys):
    """A bench stopped after its first measured cell leaves that cell on disk, marked incomplete."""
    from nagare.engine import bench

    real, calls = bench.measure, []

    def measure_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "measure", measure_then_stop)
    assert main(["bench", "diffusion3d", "--backend", "numpy", "--out", str(tmp_path), "--case", "32x32x32",
                 "--min-time", "0.01"]) == 130
    assert "interrupted" in capsys.readouterr().out
    data = json.load(open(tmp_path / "diffusion3d.json"))
    assert data["metadata"]["complete"] is False
    assert [r["ok"] for r in data["results"]].count(True) == 1
    assert data["results"][0]["ok"] and data["results"][0]["roofline_pct"] > 0
    # the table and the plot of what was measured too, the table marked partial
    assert "(interrupted: partial)" in (tmp_path / "diffusion3d.md").read_text()
    assert Image.open(tmp_path / "diffusion3d-roofline.png").size[0] > 100


def test_bench_stopped_before_any_cell_says_nothing_was_written(tmp_path, monkeypatch, capsys):
    from nagare.engine import bench

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "measure", stop)
    assert main(["bench", "diffusion3d", "--backend", "numpy", "--out", str(tmp_path), "--case", "32x32x32",
                 "--only", "default"]) == 130
    assert "nothing written" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("preset", ["diffusion3d", "diffusion3d-thin"])
def test_every_preset_runs_a_few_steps_on_numpy(preset):
    from nagare.app.frames import field_image
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset(preset, backend="numpy"), get_backend("numpy"))
    e.step(3)
    e.diagnostics()
    img = field_image(e)
    assert img.dtype == np.uint8 and img.ndim == 3


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_divergence_stops_with_status_3_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    from nagare.app.headless import RunOptions, run
    from nagare.engine.backend import get_backend
    from nagare.engine.checkpoint import load_checkpoint
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("diffusion3d", ["grid.nx=16", "grid.ny=16", "grid.nz=16"], backend="numpy"),
                      get_backend("numpy"))
    ck = tmp_path / "good.npz"
    assert run(e, RunOptions(steps=10, checkpoint=ck, checkpoint_every=5, batch=5, quiet=True)) == 0
    good = load_checkpoint(ck)
    e.f[0, 0, 0] = np.inf  # poison the state: the next batch must stop the run
    status = run(e, RunOptions(steps=20, checkpoint=ck, checkpoint_every=5, batch=5, quiet=True,
                               timings=tmp_path / "t.csv", dump=tmp_path / "end.npz"))
    err = capsys.readouterr().err
    assert status == 3
    assert "diffusion3d diverged at step 15" in err and "last good checkpoint" in err
    assert f"--dump {tmp_path / 'end.npz'} not written: the state diverged" in err  # said, not skipped silently
    assert not (tmp_path / "end.npz").exists()
    assert load_checkpoint(ck)["meta"]["step"] == good["meta"]["step"] == 10
    assert (tmp_path / "t.csv").exists()  # the timing log of what ran is kept


def test_timings_name_with_dots_keeps_its_stem(tmp_path):
    assert main(["run", "diffusion3d", "--steps", "5", "--timings", str(tmp_path / "r_0.5.csv"), "--quiet",
                 *SMALL]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r_0.5.csv", "r_0.5.json"]


def test_checkpoint_every_needs_checkpoint(capsys):
    assert main(["run", "diffusion3d", "--steps", "5", "--checkpoint-every", "2", *SMALL]) == 2
    assert "needs --checkpoint FILE" in capsys.readouterr().err


def test_resume_with_other_batching_is_bit_identical_including_time(tmp_path):
    full, part, ck = tmp_path / "full.npz", tmp_path / "part.npz", tmp_path / "c.npz"
    assert main(["run", "diffusion3d", "--steps", "23", "--batch", "7", "--dump", str(full), "--quiet", *SMALL]) == 0
    assert main(["run", "diffusion3d", "--steps", "11", "--batch", "3", "--checkpoint", str(ck), "--quiet",
                 *SMALL]) == 0
    assert main(["run", "-", "--steps", "12", "--batch", "5", "--resume", str(ck), "--dump", str(part), "--quiet",
                 "--backend", "numpy"]) == 0
    a, b = np.load(full), np.load(part)
    np.testing.assert_array_equal(a["f"], b["f"])
    assert float(a["time"]) == float(b["time"])


def test_bench_refuses_an_unknown_case_in_one_line(tmp_path, capsys):
    """A case the family does not have is an error naming the cases it has, not an empty table."""
    assert main(["bench", "diffusion3d", "--backend", "numpy", "--out", str(tmp_path), "--case", "2048x2048"]) != 0
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert len(err) == 1 and "no case '2048x2048' on numpy" in err[0] and "32x32x32" in err[0]
    assert "or any grid size NXxNYxNZ" in err[0]
    assert not out  # refused before the bandwidth measurement and the header
    assert not (tmp_path / "diffusion3d.json").exists()


def test_bench_measures_a_grid_size_the_family_does_not_list(tmp_path, capsys):
    assert main(["bench", "lbm2d", "--backend", "numpy", "--out", str(tmp_path), "--case", "48x32",
                 "--case", "64x64", "--only", "reference", "--min-time", "0.02"]) == 0
    data = json.load(open(tmp_path / "lbm2d.json"))
    cases = [r["case"] for r in data["results"]]
    assert cases[0] == "64x64" and "48x32" in cases and set(cases) == {"64x64", "48x32"}
    ok = [r for r in data["results"] if r["case"] == "48x32" and r["ok"]]
    assert ok and ok[0]["updates_per_s"] > 0



def test_a_second_bench_the_same_day_keeps_the_first_ones_results(tmp_path, monkeypatch, capsys):
    """The default folder (family, device, date) is not reused: the second run goes to …-2."""
    monkeypatch.chdir(tmp_path)
    args = ["bench", "lbm2d", "--backend", "numpy", "--only", "reference", "--min-time", "0.02"]
    assert main([*args, "--case", "48x32"]) == 0
    assert main([*args, "--case", "64x64"]) == 0
    first, second = sorted(tmp_path.glob("bench-lbm2d-*"), key=lambda f: len(f.name))
    assert second.name == first.name + "-2"
    assert {r["case"] for r in json.load(open(first / "lbm2d.json"))["results"]} == {"48x32"}
    assert {r["case"] for r in json.load(open(second / "lbm2d.json"))["results"]} == {"64x64"}
    # a folder named with --out is used as given, and the replacement is said
    assert main([*args, "--case", "48x32", "--out", str(second)]) == 0
    out = capsys.readouterr()
    assert f"replacing the earlier results in {second}/" in out.err
    assert out.out.count("case | variant | ms/step") == 3  # the streamed rows' header, once a run

# ---- exit codes and lost outputs (issue 19) ------------------------------------------------
@pytest.mark.parametrize("option,name", [("--dump", "out.npz"), ("--dump", "out.vtkhdf"), ("--timings", "out.csv"),
                                         ("--checkpoint", "out.npz"), ("--frames", "fr"), ("--dump-dir", "dd"),
                                         ("--series", "s.vtkhdf")])
@pytest.mark.parametrize("where", ["under a file", "in /proc"])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, monkeypatch, option, name,
                                                                      where):
    """A folder that cannot be (a file in its place) or that takes no files (/proc) is found before
    anything runs: one line naming the option and the path, exit 2, nothing computed or written."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / name if where == "under a file" else Path("/proc") / f"nagare-{os.getpid()}" / name
    if where == "in /proc" and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    from nagare.app import cli

    built = []
    monkeypatch.setattr(cli, "create_engine", lambda *a, **k: built.append(a))  # must not be reached
    extra = ["--dump-every", "2"] if option == "--dump-dir" else []
    status = main(["run", "diffusion3d", "--steps", "6", option, str(target), *extra, *SMALL])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"nagare: {option} {target}: cannot write there: ") and "nothing was run" in err[0]
    said = f"{blocker} is a file, not a folder" if where == "under a file" else "/proc takes no new files"
    assert said in err[0], err
    assert not built and sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no lock, no folder made
    assert blocker.read_text() == "x"


def test_a_name_too_long_is_refused_before_the_run(tmp_path, capsys):
    """A name its file system cannot hold (with the temporary's name around it) is found before the
    run, not after it."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    for n in (limit, limit - 10):  # too long itself; fits, but its temporary .NAME.PID-N.tmp does not
        target = tmp_path / ("d" * (n - 4) + ".npz")
        assert main(["run", "diffusion3d", "--steps", "3", "--dump", str(target), "--quiet", *SMALL]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the file name is too long for this file system" in err[0], err
    assert not list(tmp_path.iterdir())
    assert main(["run", "diffusion3d", "--steps", "3", "--dump", str(tmp_path / ("d" * (limit - 30) + ".npz")),
                 "--quiet", *SMALL]) == 0


def test_an_output_path_that_is_a_folder_is_refused(tmp_path, capsys):
    (tmp_path / "d.npz").mkdir()
    assert main(["run", "diffusion3d", "--steps", "3", "--dump", str(tmp_path / "d.npz"), "--quiet", *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'd.npz'} is a folder, not a file" in err[0]


def test_a_filling_disk_is_said_loudly_while_running_and_at_the_end(tmp_path, capsys, monkeypatch):
    """Room for one checkpoint, not two: every later one fails; the run says so each time, ends
    with which checkpoint is on disk, and exits non-zero."""
    from nagare.app import headless
    from nagare.app.atomic import ExportError
    from nagare.engine.checkpoint import load_checkpoint

    real, calls = headless.save_checkpoint, []

    def save_until_full(ckpt, path):
        calls.append(ckpt["meta"]["step"])
        if len(calls) > 1:
            raise ExportError(f"cannot write {path}: No space left on device")
        return real(ckpt, path)

    monkeypatch.setattr(headless, "save_checkpoint", save_until_full)
    ck = tmp_path / "c.npz"
    status = main(["run", "diffusion3d", "--steps", "20", "--batch", "5", "--checkpoint", str(ck),
                   "--checkpoint-every", "5", "--quiet", *SMALL])
    err = capsys.readouterr().err
    assert status == 4
    for step in (10, 15, 20):
        assert f"WARNING: checkpoint at step {step} NOT written: cannot write {ck}: No space left on device; " \
               f"the checkpoint on disk is still step 5" in err, err
    assert "NOT WRITTEN: checkpoint at steps 10, 15, 20" in err
    assert f"NOT WRITTEN: the last checkpoint written is step 5 ({ck})" in err
    assert load_checkpoint(ck)["meta"]["step"] == 5


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    from nagare.app.atomic import write_text_atomic

    dead = tmp_path / ".c.npz.4194399.tmp"  # above Linux's largest pid: no such process
    mine = tmp_path / f".d.npz.{os.getpid()}.tmp"
    parent = tmp_path / f".e.npz.{os.getppid()}.tmp"
    other = tmp_path / ".notes.tmp"
    for p in (dead, mine, parent, other):
        p.write_bytes(b"x" * 1000)
    # a writer killed mid-write: its temporary is named with its own (now dead) pid
    subprocess.run([sys.executable, "-c", "import os; open(f'.big.npz.{os.getpid()}.tmp', 'wb').write(b'x' * 4096);"
                    " os.kill(os.getpid(), 9)"], cwd=tmp_path, timeout=60)
    killed = list(tmp_path.glob(".big.npz.*.tmp"))
    assert len(killed) == 1
    write_text_atomic(tmp_path / "t.txt", "hello")
    assert not dead.exists() and not killed[0].exists()
    assert mine.exists() and parent.exists() and other.exists()  # live processes' and foreign files stay
    assert (tmp_path / "t.txt").read_text() == "hello"


def test_atomic_write_fsyncs_the_file_and_its_folder(tmp_path, monkeypatch):
    import stat as stat_

    from nagare.engine import atomic

    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(stat_.S_ISDIR(os.fstat(fd).st_mode))
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    atomic.write_text_atomic(tmp_path / "sub" / "t.txt", "x")
    assert synced == [False, True]  # the temporary file before the rename, the folder after it


# ---- timing logs are streamed ---------------------------------------------------------------
class _FakeReport:
    def __init__(self, phases):
        self.steps, self.phase_ms_per_step = 5, phases
        self.ms_per_step, self.updates_per_s, self.gbytes_per_s, self.roofline_fraction = 1.0, 2.0, 3.0, 0.5


def _fake_engine(tmp_path):
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("diffusion3d", ["grid.nx=8", "grid.ny=8", "grid.nz=8"], backend="numpy"),
                      get_backend("numpy"))
    e.phases_now = {"diffuse": 1.0}
    e.batch_report = lambda wait=False: _FakeReport(dict(e.phases_now))
    return e


def test_timing_log_streams_rows_and_stays_readable(tmp_path):
    from nagare.app.timinglog import TimingLog

    e = _fake_engine(tmp_path)
    log = TimingLog(e, ["nagare", "test"], path=tmp_path / "t.json")
    for _ in range(3):
        log.record()
    # on disk, complete and readable, before the run ends
    assert len(json.load(open(tmp_path / "t.json"))["rows"]) == 3
    assert len(list(csv.DictReader(open(tmp_path / "t.csv")))) == 3
    e.phases_now = {"diffuse": 1.0, "halo": 0.5}  # a phase that first appears mid-run (a variant switch)
    log.record()
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert len(rows) == 4 and rows[0]["phase_halo_ms"] == "" and rows[-1]["phase_halo_ms"] == "0.5"
    data = json.load(open(tmp_path / "t.json"))
    assert "phase_halo_ms" in data["columns"] and data["metadata"]["command_line"] == "nagare test"
    assert log.write(tmp_path / "t.csv") == [tmp_path / "t.csv", tmp_path / "t.json"]
    copy = log.write(tmp_path / "other" / "c.csv")  # the app's export: a copy, atomically
    assert json.load(open(copy[1]))["rows"] == data["rows"]
    log.close()


def test_timing_log_memory_is_bounded(tmp_path):
    import tracemalloc

    from nagare.app.timinglog import TimingLog

    e = _fake_engine(tmp_path)
    for path in (tmp_path / "t.csv", None):  # the CLI's log, and the app's (spooled to a temporary folder)
        log = TimingLog(e, path=path)
        for _ in range(200):
            log.record()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            log.record()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert grown < 64 * 1024, grown  # 5000 rows held in memory would be ~3 MB
        assert log.count == 5200
        out = log.write(tmp_path / "x" / "log.csv")
        assert len(json.load(open(out[1]))["rows"]) == 5200
        log.close()


@pytest.mark.parametrize("option,name,said", [
    ("--timings", "x.txt", ["expected FILE.csv or FILE.json", "'.txt'"]),
    # --dump writes .npz or .vtkhdf; any other name would be an .npz under a misleading suffix
    ("--dump", "x.h5", ["expected FILE.npz (NumPy) or FILE.vtkhdf (ParaView)", "x.h5"]),
])
def test_an_output_with_another_suffix_is_refused(tmp_path, capsys, option, name, said):
    assert main(["run", "diffusion3d", "--steps", "2", option, str(tmp_path / name), *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(s in err[0] for s in said)
    assert not list(tmp_path.iterdir())


def test_soak_reports_memory_growth(tmp_path, capsys):
    assert main(["soak", "diffusion3d", "--minutes", "0.05", "--samples", "4", "--json", str(tmp_path / "s.json"),
                 "--timings", str(tmp_path / "t.csv"), *SMALL]) == 0
    out = capsys.readouterr().out
    assert "soak: RSS" in out and "MiB/hour" in out
    data = json.load(open(tmp_path / "s.json"))
    assert len(data["samples"]) >= 4 and all(s["rss_bytes"] > 0 for s in data["samples"])
    assert data["summary"]["steps"] > 0 and data["summary"]["rss_growth_mib"] is not None
    assert list(csv.DictReader(open(tmp_path / "t.csv")))


# ---- option checks ----------------------------------------------------------------------------
@pytest.mark.parametrize("args,fragment", [
    (["bench", "diffusion3d", "--min-time", "nan"], "--min-time: 'nan': expected a positive, finite number"),
    (["bench", "diffusion3d", "--min-time", "-1"], "--min-time: '-1'"),
    (["bench", "diffusion3d", "--min-time", "0"], "--min-time: '0'"),
    (["bench", "diffusion3d", "--min-time", "inf"], "--min-time: 'inf'"),
    (["bench", "diffusion3d", "--jobs", "-5"], "--jobs: -5: expected 0"),
    (["run", "diffusion3d", "--steps", "many"], "--steps: invalid int value: 'many'"),
    (["run"], "the following arguments are required: preset"),
    (["soak", "diffusion3d", "--minutes", "nan"], "--minutes: 'nan'"),
    (["soak", "diffusion3d"], "the following arguments are required: --minutes"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
])
def test_bad_options_are_one_line_exit_2(args, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nagare: ") and fragment in err[0], err
    assert not list(tmp_path.iterdir())  # nothing was run or written


def test_gui_without_a_display_says_what_to_do_in_one_line(tmp_path):
    env = {k: v for k, v in _env().items() if k != "QT_QPA_PLATFORM"}
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "gui"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "needs a display" in err[0] and "nagare run PRESET" in err[0], proc.stderr


@pytest.mark.parametrize("argv,want", [(["gui", "lbm2d-cavity", "--fps", "60"], ("lbm2d-cavity", 60.0)),
                                       (["--fps", "24"], (None, 24.0)), (["gui"], (None, None))])
def test_gui_fps_reaches_the_window(argv, want, monkeypatch):
    from nagare.app import cli

    seen = []
    monkeypatch.setattr(cli, "has_display", lambda: True)
    monkeypatch.setattr(cli, "launch_app", lambda preset, backend, fps=None: seen.append((preset, fps)) or 0)
    assert main(argv) == 0
    assert seen == [want]


@pytest.mark.parametrize("value", ["0", "-5", "abc", "inf", "5000"])
def test_gui_fps_out_of_range_is_one_line_exit_2(value, capsys):
    assert main(["gui", "--fps", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nagare: ") and "--fps" in err[-1], err


# ---- checkpoints ------------------------------------------------------------------------------
def _write_ckpt(path, meta, arrays):
    payload = {f"state/{k}": v for k, v in arrays.items()}
    payload["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **payload)


@pytest.fixture
def good_ckpt(tmp_path):
    from nagare.engine.checkpoint import load_checkpoint

    ck = tmp_path / "good.npz"
    assert main(["run", "diffusion3d", "--steps", "4", "--checkpoint", str(ck), "--quiet", *SMALL]) == 0
    return load_checkpoint(ck)


@pytest.mark.parametrize("case,fragment", [
    ("meta_list", "meta is a list, not an object"),
    ("no_preset", "meta lacks 'preset'"),
    ("step_text", "meta.step 'abc' is not a non-negative integer"),
    ("step_negative", "meta.step -5 is not a non-negative integer"),
    ("step_float", "meta.step 5.5 is not a non-negative integer"),
    ("step_bool", "meta.step True is not a non-negative integer"),
    ("time_nan", "meta.time nan is not a finite non-negative number"),
    ("time_text", "meta.time '1' is not a finite"),
    ("family_unknown", "meta.family 'warp' is not an engine family"),
    ("family_list", "meta.family ['lbm2d'] is not an engine family"),
    ("format", "checkpoint format 99 is not 1"),
    ("preset_text", "meta.preset is a str, not an object"),
    ("preset_other_engine", "meta.preset.engine 'wave2d' does not match meta.family 'diffusion3d'"),
    ("variants_list", "is not an object of axis = choice"),
    ("variants_choice", "meta.variants.kernel = 'warp-magic' (stored in this checkpoint file) is not a choice of "
                        "diffusion3d's variant axis 'kernel'; allowed: "),
    ("variants_axis", "meta.variants names the axis 'warp' (= 'on'), which diffusion3d does not have (this "
                      "checkpoint file's variants)"),
    ("state_nan", "state array 'f' holds 1 non-finite value (NaN/Inf)"),
    ("state_inf", "state array 'f' holds 2 non-finite values"),
    ("state_text", "state array 'f' has dtype <U1, not a number type"),
    ("no_state", "holds no state arrays"),
    ("no_meta", "no 'meta' entry"),
    ("not_npz", "not a nagare checkpoint"),
    ("folder", "not a regular file"),
    ("missing", "no such checkpoint file"),
])
def test_a_broken_checkpoint_is_refused_in_one_line(case, fragment, good_ckpt, tmp_path, capsys):
    from nagare.engine.checkpoint import load_checkpoint
    from nagare.engine.errors import CheckpointError

    meta, arrays = json.loads(json.dumps(good_ckpt["meta"])), dict(good_ckpt["arrays"])
    path = tmp_path / f"{case}.npz"
    edits = {
        "meta_list": lambda: [1, 2], "step_text": lambda: {**meta, "step": "abc"},
        "step_negative": lambda: {**meta, "step": -5}, "step_float": lambda: {**meta, "step": 5.5},
        "step_bool": lambda: {**meta, "step": True}, "time_nan": lambda: {**meta, "time": float("nan")},
        "time_text": lambda: {**meta, "time": "1"}, "family_unknown": lambda: {**meta, "family": "warp"},
        "family_list": lambda: {**meta, "family": ["lbm2d"]}, "format": lambda: {**meta, "format": 99},
        "preset_text": lambda: {**meta, "preset": "diffusion3d"},
        "preset_other_engine": lambda: {**meta, "preset": {**meta["preset"], "engine": "wave2d"}},
        "variants_list": lambda: {**meta, "variants": ["kernel"]},
        "variants_choice": lambda: {**meta, "variants": {**meta["variants"], "kernel": "warp-magic"}},
        "variants_axis": lambda: {**meta, "variants": {**meta["variants"], "warp": "on"}},
        "no_preset": lambda: {k: v for k, v in meta.items() if k != "preset"},
    }
    if case in edits:
        _write_ckpt(path, edits[case](), arrays)
    elif case.startswith("state_"):
        f = arrays["f"].copy()
        if case == "state_nan":
            f.flat[7] = np.nan
        elif case == "state_inf":
            f.flat[:2] = [np.inf, -np.inf]
        else:
            f = np.array(["x"])
        _write_ckpt(path, meta, {**arrays, "f": f})
    elif case == "no_state":
        _write_ckpt(path, meta, {})
    elif case == "no_meta":
        np.savez(path, x=np.zeros(3))
    elif case == "not_npz":
        path.write_text("hello")
    elif case == "folder":
        path.mkdir()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and fragment in msg and "\n" not in msg, msg
    # the CLI: one line, exit 2, nothing run
    assert main(["run", "-", "--resume", str(path), "--steps", "2", "--quiet", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "Traceback" not in err[0], err


@pytest.fixture(scope="module")
def amr_and_compact_ckpts(tmp_path_factory):
    """Good checkpoints (step 4) of an amr3d preset with tracers and of a compact one."""
    from nagare.engine.checkpoint import load_checkpoint

    folder = tmp_path_factory.mktemp("ck")
    amr, adv = folder / "amr.npz", folder / "adv.npz"
    assert main(["run", "amr3d-sphere-re20", "--steps", "4", "--checkpoint", str(amr), "--quiet", "--backend", "numpy",
                 "--set", "tracers.release_every=1"]) == 0
    assert main(["run", "compact-advection1d", "--steps", "4", "--checkpoint", str(adv), "--quiet", "--backend",
                 "numpy", "--set", "grid.nx=64"]) == 0
    return {"amr": load_checkpoint(amr), "adv": load_checkpoint(adv)}


@pytest.mark.parametrize("which,case,fragment", [
    ("amr", "tracer_clock", "state array 'tracers/step' = [-100] is not the run's step clock meta.step = 4"),
    ("amr", "tracers_far", "alive tracers lie outside the domain along x (0 … 24 level-0 units)"),
    ("amr", "extra_state", "checkpoint holds state array 'extra' that this amr3d engine does not have"),
    ("amr", "time_huge", "meta.time = 1e+300 does not match meta.step × Δt = 4 × 1 = 4"),
    ("amr", "variants_bad", "meta.variants.kernels = 'warp-magic' (stored in this checkpoint file)"),
    ("adv", "extra_state", "checkpoint holds state array 'extra' that this compact engine does not have"),
    ("adv", "time_huge", "meta.time = 1e+300 does not match meta.step × Δt = 4 × 0.001 = 0.004"),
])
def test_an_inconsistent_amr3d_or_compact_checkpoint_is_refused_in_one_line(which, case, fragment,
                                                                             amr_and_compact_ckpts, tmp_path, capsys):
    """audit D13: accepted before (exit 0). Each is refused naming the checkpoint file, in one line."""
    good = amr_and_compact_ckpts[which]
    meta, arrays = json.loads(json.dumps(good["meta"])), dict(good["arrays"])
    if case == "tracer_clock":
        arrays["tracers/step"] = np.array([-100], arrays["tracers/step"].dtype)
    elif case == "tracers_far":
        arrays["tracers/positions"] = np.where(arrays["tracers/alive"][:, None], 1e6,
                                               arrays["tracers/positions"]).astype(arrays["tracers/positions"].dtype)
    elif case == "extra_state":
        arrays["extra"] = np.zeros(3)
    elif case == "time_huge":
        meta["time"] = 1e300
    elif case == "variants_bad":
        meta["variants"] = {**meta["variants"], "kernels": "warp-magic"}
    path = tmp_path / f"{which}-{case}.npz"
    _write_ckpt(path, meta, arrays)
    assert main(["run", "-", "--resume", str(path), "--steps", "2", "--quiet", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nagare: {path}: ") and fragment in err[0], err
    good_path = tmp_path / f"{which}-good.npz"
    _write_ckpt(good_path, good["meta"], good["arrays"])
    assert main(["run", "-", "--resume", str(good_path), "--steps", "2", "--quiet", "--backend", "numpy"]) == 0


def test_checkpoint_of_another_family_is_refused_before_the_variants(tmp_path, capsys):
    ck = tmp_path / "w.npz"
    assert main(["run", "wave2d", "--steps", "3", "--checkpoint", str(ck), "--quiet", "--set", "grid.nx=24",
                 "--set", "grid.ny=16", "--backend", "numpy"]) == 0
    assert main(["run", "lbm2d-cavity", "--resume", str(ck), "--steps", "2", "--quiet", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this checkpoint is for wave2d, not lbm2d" in err[0], err
    assert f"nagare run - --resume {ck}" in err[0] and "stencil-host" not in err[0]


def test_checkpoint_of_another_preset_is_refused_naming_it(tmp_path, capsys):
    ck, out = tmp_path / "tg.npz", tmp_path / "d.npz"
    size = ["--set", "grid.nx=32", "--set", "grid.ny=32", "--backend", "numpy", "--quiet"]
    assert main(["run", "lbm2d-taylor-green", "--steps", "3", "--checkpoint", str(ck), *size]) == 0
    assert main(["run", "lbm2d-cavity", "--set", "grid.n=32", "--resume", str(ck), "--steps", "2", "--quiet",
                 "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this checkpoint belongs to preset" in err[0] and "lbm2d-taylor-green" in err[0], err
    assert f"resume it with its own preset: nagare run - --resume {ck}" in err[0]
    # other --set values of the same preset: refused too, saying so
    assert main(["run", "lbm2d-taylor-green", "--resume", str(ck), "--steps", "2", "--backend", "numpy"]) == 2
    assert "made with other settings of" in capsys.readouterr().err
    # what the message says works, bit for bit with the straight run; and --set may not change the physics
    assert main(["run", "-", "--resume", str(ck), "--steps", "2", "--dump", str(out), "--quiet",
                 "--backend", "numpy"]) == 0
    assert int(np.load(out)["step"]) == 5
    straight = tmp_path / "s.npz"
    assert main(["run", "lbm2d-taylor-green", "--steps", "5", "--dump", str(straight), *size]) == 0
    np.testing.assert_array_equal(np.load(out)["rho"], np.load(straight)["rho"])
    assert main(["run", "-", "--resume", str(ck), "--set", "physics.tau=0.9", "--steps", "2",
                 "--backend", "numpy"]) == 2
    assert "changes the checkpoint's simulation" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["diffusion3d", "wave2d", "lbm2d-cavity", "lbm2d-cylinder", "sph-hydrostatic"])
def test_resume_from_the_checkpoints_own_preset(preset, tmp_path):
    """`nagare run - --resume FILE` for every family (the stored preset validates again)."""
    ck, out = tmp_path / "c.npz", tmp_path / "d.npz"
    assert main(["run", preset, "--steps", "2", "--checkpoint", str(ck), "--quiet", "--backend", "numpy"]) == 0
    assert main(["run", "-", "--resume", str(ck), "--steps", "2", "--dump", str(out), "--quiet",
                 "--backend", "numpy"]) == 0
    assert int(np.load(out)["step"]) == 4


def test_dash_without_resume_is_one_line(capsys):
    assert main(["run", "-", "--backend", "numpy"]) == 2
    assert "give --resume FILE" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_an_output_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "t.csv")
    os.mkfifo(tmp_path / "d.npz")
    proc = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "diffusion3d", "--steps", "3", "--timings",
                           "t.csv", "--dump", "d.npz", "--quiet", *SMALL], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert "t.csv exists and is not a regular file" in proc.stderr and "Traceback" not in proc.stderr
    assert int(np.load(tmp_path / "d.npz")["step"]) == 3  # the dump replaced the FIFO atomically


def test_a_blow_up_is_one_line_and_the_last_good_checkpoint_is_physical(tmp_path):
    """lbm2d-cavity at Re 100,000 with a 0.3 lid on 128²: the run stops when the state leaves its
    physical bounds (before NaN), says so in one line without floating-point warnings, and the
    checkpoint left on disk is physical (positive density, speed below the lattice sound speed)."""
    import subprocess
    import sys

    from nagare.engine.backend import get_backend
    from nagare.engine.checkpoint import load_checkpoint
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    ck = tmp_path / "ck.npz"
    over = ["grid.n=128", "physics.reynolds=100000.0", "physics.lid_velocity=0.3"]
    cmd = [sys.executable, "-m", "nagare.app.cli", "run", "lbm2d-cavity", "--backend", "numpy", "--steps", "5000",
           "--checkpoint", str(ck), "--checkpoint-every", "10", "--quiet"]
    for o in over:
        cmd += ["--set", o]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Warning" not in r.stderr, r.stderr
    assert sum("diverged" in ln for ln in lines) == 1 and lines[0].startswith("nagare: lbm2d diverged"), r.stderr
    ckpt = load_checkpoint(ck)
    e = create_engine(load_preset("lbm2d-cavity", over, backend="numpy"), get_backend("numpy"))
    e.restore(ckpt)
    d = e.diagnostics()  # raises Diverged if the checkpoint left its bounds
    assert d["min_density"] > 0 and d["max_speed"] < 3 ** -0.5


def test_sph_particles_flying_off_are_a_divergence(tmp_path):
    from nagare.engine.backend import get_backend
    from nagare.engine.errors import Diverged
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("sph-dambreak2d", backend="numpy"), get_backend("numpy"))
    e.step(2)
    e.diagnostics()
    e.pos[e.fluid.nonzero()[0][0], 0] = 5e11  # one particle far outside the tank
    with pytest.raises(Diverged, match="max_distance"):
        e.diagnostics()


def test_gpus_on_a_family_that_is_not_decomposed_says_so(capsys):
    assert main(["run", "compact-advection1d", "--gpus", "2", "--backend", "numpy", "--steps", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the compact family is not decomposed" in err[0], err



def test_a_split_run_says_how_it_is_split(capsys):
    assert main(["run", "lbm2d-cavity", "--gpus", "2", "--backend", "numpy", "--steps", "2"]) == 0
    assert "the grid is split into 2 sub-domains, all on this one CPU" in capsys.readouterr().err

def test_stl_paths_resolve_from_the_file_that_names_them_and_the_mesh_is_part_of_the_preset(tmp_path, capsys):
    """amr3d STL bodies (audit D1): a relative mesh path is read against the folder of the file
    that names it (not the checkpoint's, not an extending file's), stored absolute, and the mesh's
    content joins the preset: a checkpoint does not resume onto another mesh."""
    import shutil

    from nagare.engine.presets import PRESET_DIR

    src = tmp_path / "mine"
    (src / "amr3d-stl").mkdir(parents=True)
    shutil.copy(PRESET_DIR / "amr3d-stl.toml", src / "mystl.toml")
    shutil.copy(PRESET_DIR / "amr3d-stl" / "body.stl", src / "amr3d-stl" / "body.stl")
    (tmp_path / "ext.toml").write_text(f'extends = "{src / "mystl.toml"}"\ndescription = "extends it"\n')
    ck = tmp_path / "elsewhere" / "ck.npz"
    quick = ["--backend", "numpy", "--quiet", "--steps", "2", "--set", "tracers.count=0"]
    assert main(["run", str(tmp_path / "ext.toml"), *quick]) == 0  # the parent's relative path
    assert main(["run", str(src / "mystl.toml"), *quick, "--checkpoint", str(ck)]) == 0
    assert main(["run", "-", "--resume", str(ck), "--backend", "numpy", "--quiet", "--steps", "2"]) == 0
    capsys.readouterr()
    tetra = "solid t\n" + "".join(
        f"facet normal 0 0 0\nouter loop\n{''.join(f'vertex {v}' + chr(10) for v in f)}endloop\nendfacet\n"
        for f in (("0 0 0", "0 1 0", "1 0 0"), ("0 0 0", "1 0 0", "0 0 1"), ("0 0 0", "0 0 1", "0 1 0"),
                  ("1 0 0", "0 1 0", "0 0 1"))) + "endsolid t\n"
    (src / "amr3d-stl" / "body.stl").write_text(tetra)  # the user replaces the mesh
    assert main(["run", "-", "--resume", str(ck), "--backend", "numpy", "--quiet", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has changed since" in err[0], err
    assert main(["run", str(src / "mystl.toml"), "--resume", str(ck), *quick]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mesh_sha256" in err[0], err


def test_series_of_a_preset_without_grids_is_refused_before_running(tmp_path, capsys):
    assert main(["run", "compact-advection1d", "--backend", "numpy", "--steps", "4", "--quiet",
                 "--series", str(tmp_path / "s.vtkhdf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds grids and octrees" in err[0] and "s.vtkhdf" in err[0], err
    assert not list(tmp_path.iterdir())


def test_bench_refuses_an_only_that_selects_nothing(tmp_path, capsys):
    """A --only text in no variant label is refused before measuring, naming the labels there are."""
    argv = ["bench", "compact", "--backend", "numpy", "--out", str(tmp_path), "--case", "128x128-x-fp64",
            "--only", "default", "--only", "nonsense"]
    assert main(argv) != 0
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert len(err) == 1 and "--only 'nonsense' matches no variant label" in err[0] and "solver=scan" in err[0]
    assert "'default'" not in err[0]  # the text that does select cells is not blamed
    assert not out and not list(tmp_path.iterdir())


def test_set_on_the_cpu_is_checked_against_the_grid_that_runs(tmp_path, capsys):
    """On NumPy a preset's [cpu_overrides] give another grid and Δt: a --set physics.dt is checked
    against the CPU grid's stability limit, not the GPU grid's, and the run's note on the preset's
    overrides names only those that run as the preset gives them (the user's --set values are not
    the preset's); the GPU variant is still checked as the file gives it."""
    dump = tmp_path / "v.npz"
    assert main(["run", "compact-vortex-outflow", "--steps", "1", "--backend", "numpy", "--set", "physics.dt=0.006",
                 "--set", "grid.nx=64", "--set", "grid.ny=64", "--dump", str(dump)]) == 0
    err = capsys.readouterr().err
    note = [line for line in err.splitlines() if "[cpu_overrides]" in line]
    assert note == ["nagare: the preset's [cpu_overrides] apply (on CPU: run.steps = 350)"], err
    np.testing.assert_allclose(float(np.load(dump)["time"]), 0.006)
    # above the CPU grid's own limit: refused, with that grid's spacing
    assert main(["run", "compact-vortex-outflow", "--steps", "1", "--backend", "numpy",
                 "--set", "physics.dt=0.02"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exceeds the RK4 stability limit" in err[0] and "h = 0.01575" in err[0]


@pytest.mark.parametrize("name", ["compact-rotating-cone", "compact-vortex-outflow"])
def test_cpu_overrides_keep_the_physical_end_time(name):
    """[cpu_overrides] that change Δt change run.steps too: a NumPy run ends at the time the preset's
    comparison is made (the app pauses there), not at twice or four times it."""
    from nagare.engine.presets import load_preset

    gpu, cpu = load_preset(name, backend="cupy"), load_preset(name, backend="numpy")
    assert cpu.physics.dt != gpu.physics.dt
    np.testing.assert_allclose(cpu.physics.dt * cpu.run.steps, gpu.physics.dt * gpu.run.steps, rtol=1e-12)


def test_the_summary_says_where_the_frames_went(tmp_path, capsys):
    assert main(["run", "diffusion3d", "--steps", "4", "--frames", str(tmp_path / "fr"), "--every", "2", *SMALL]) == 0
    err = capsys.readouterr().err
    assert f"3 frames in {tmp_path / 'fr'}/" in err


def test_legend_text_is_drawn_with_a_font_that_has_its_letters():
    """φ, ρ, ∞ and the en dash of "[–]" in a frame's colour bar: DejaVu Sans, not Pillow's Latin-1
    default (which drew them as boxes)."""
    from nagare.app.frames import _font

    font = _font(12)
    assert "DejaVu" in " ".join(font.getname())
    for ch in "φρ∞–":
        assert font.getmask(ch).getbbox() is not None, ch  # drawn, not blank


def test_an_amr3d_vtkhdf_dump_says_what_each_of_its_three_files_holds(tmp_path, capsys):
    out = tmp_path / "tree.vtkhdf"
    assert main(["run", "amr3d-periodic", "--backend", "numpy", "--steps", "1", "--dump", str(out)]) == 0
    err = capsys.readouterr().err
    said = {line.split(": ", 2)[1]: line.split(": ", 2)[2] for line in err.splitlines()
            if line.startswith(f"nagare: {tmp_path}")}
    assert said[str(out)].startswith("ImageData, ") and "resampled onto one uniform grid" in said[str(out)]
    assert said[str(tmp_path / "tree_leaves.vtkhdf")].startswith("PolyData lines, leaves: the outlines of ")
    assert said[str(tmp_path / "tree_octree.vtkhdf")].startswith("OverlappingAMR, the octree itself")
    assert all(os.path.isfile(p) for p in said)

"""The headless CLI end to end on NumPy: outputs, resume, Ctrl-C, the no-display default run."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

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
    assert rows and set(rows[0]) == {"wall_time", "step", "steps_measured", "engine", "variant", "phase_diffuse_ms",
                                     "ms_per_step", "updates_per_s", "gbytes_per_s", "roofline_pct"}
    assert sum(int(r["steps_measured"]) for r in rows) == 50
    assert rows[-1]["engine"] == "diffusion3d" and rows[-1]["variant"] == "kernel=array"
    meta = json.load(open(tmp_path / "t.json"))["metadata"]
    for key in ("device", "numpy", "preset_hash", "command_line", "roofline_bytes_per_s"):
        assert key in meta
    d = np.load(tmp_path / "d.npz")
    assert d["f"].shape == (12, 16, 24) and int(d["step"]) == 50
    np.testing.assert_allclose(float(d["time"]), 50 * 0.1)
    pngs = sorted((tmp_path / "fr").glob("*.png"))
    assert [p.name for p in pngs] == ["frame_00000000.png", "frame_00000025.png", "frame_00000050.png"]
    img = np.asarray(Image.open(pngs[-1]))
    assert img.ndim == 3 and max(img.shape[:2]) >= 512 and img.std() > 1  # not uniform


def test_dump_every_writes_a_series(tmp_path):
    assert main(["run", "diffusion3d", "--steps", "20", "--dump-every", "5", "--dump-dir", str(tmp_path), "--quiet",
                 *SMALL]) == 0
    steps = [int(np.load(p)["step"]) for p in sorted(tmp_path.glob("*.npz"))]
    assert steps == [5, 10, 15, 20]


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


def test_unwritable_frames_folder_does_not_stop_the_run(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where a folder should be: every frame write fails
    assert main(["run", "diffusion3d", "--steps", "10", "--frames", str(blocker / "frames"), "--every", "5",
                 "--dump", str(tmp_path / "d.npz"), "--quiet", *SMALL]) == 0
    err = capsys.readouterr().err
    assert "frame not written: cannot write" in err
    assert int(np.load(tmp_path / "d.npz")["step"]) == 10  # the run went on


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_ctrl_c_stops_cleanly_and_writes_log_and_checkpoint(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "nagare.app.cli", "run", "diffusion3d", "--steps", "1000000",
                             "--timings", "t.csv", "--batch", "5", *SMALL], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert (tmp_path / "t.csv").exists()
    ck = list(tmp_path.glob("diffusion3d-interrupted-step*.ckpt.npz"))
    assert len(ck) == 1
    step = int(ck[0].name.split("step")[1].split(".")[0])
    assert step > 0 and step % 5 == 0  # stopped after a whole batch


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
                               timings=tmp_path / "t.csv"))
    err = capsys.readouterr().err
    assert status == 3
    assert "diffusion3d diverged at step 15" in err and "last good checkpoint" in err
    assert load_checkpoint(ck)["meta"]["step"] == good["meta"]["step"] == 10
    assert (tmp_path / "t.csv").exists()  # the timing log of what ran is kept


def test_timings_name_with_dots_keeps_its_stem(tmp_path):
    assert main(["run", "diffusion3d", "--steps", "5", "--timings", str(tmp_path / "r_0.5.csv"), "--quiet",
                 *SMALL]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r_0.5.csv", "r_0.5.json"]


def test_checkpoint_write_failure_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", "diffusion3d", "--steps", "5", "--checkpoint", str(blocker / "c.npz"), "--quiet",
                 *SMALL]) == 0
    err = capsys.readouterr().err
    assert "checkpoint not written: cannot write" in err and "Traceback" not in err


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

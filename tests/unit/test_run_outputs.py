"""What ``nagare run`` writes besides the fields: the timing log's metadata names the device (one
line, as ``nagare info`` describes it) and the variant selection of the run; the progress line of
a headless run ends once."""
from __future__ import annotations

import itertools
import json

import numpy as np
from nagare.app.cli import main
from nagare.engine.backend import DeviceInfo

SMALL_1D = ["--backend", "numpy", "--set", "grid.nx=64"]


def test_timing_json_metadata_has_the_device_and_the_variant_selection(tmp_path):
    path = tmp_path / "t.json"
    assert main(["run", "compact-advection1d", "--steps", "6", "--batch", "2", "--timings", str(path),
                 "--variant", "solver=pcr", "--quiet", *SMALL_1D]) == 0
    doc = json.loads(path.read_text())
    meta = doc["metadata"]
    assert meta["variants"]["solver"] == "pcr"
    assert set(meta["variants"]) == {"solver", "y-direction", "kernel", "batching", "pointwise", "graph"}
    # the rows say the same selection, in the label form of their "variant" column
    assert meta["variant"] == doc["rows"][0]["variant"] and "solver=pcr" in meta["variant"]
    assert meta["device_description"].startswith("CPU (") and meta["device"]["name"] in meta["device_description"]
    assert len(doc["rows"]) == 3  # streamed: one row per batch, as before


def test_timing_metadata_is_written_before_the_first_row(tmp_path):
    """Streaming: the file is complete JSON with its metadata from the moment the log opens."""
    from nagare.app.timinglog import TimingLog
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("compact-advection1d", ["grid.nx=64"], "numpy"), get_backend("numpy"),
                      variants={"solver": "cr"})
    log = TimingLog(e, ["nagare", "test"], tmp_path / "t.csv")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["rows"] == [] and doc["metadata"]["variants"]["solver"] == "cr"
    log.close()


def test_a_gpu_is_described_in_one_line():
    info = DeviceInfo(backend="cupy", name="NVIDIA H200", multiprocessors=132, memory_bytes=150_022_750_208,
                      compute_capability="9.0", cuda_runtime="12.8", cuda_driver="12.8", driver_version="570.124.06",
                      cupy_version="13.6.0")
    assert info.describe() == ("NVIDIA H200 (132 SMs, 139.7 GiB, compute capability 9.0; CUDA runtime 12.8, "
                               "driver API 12.8, driver 570.124.06; CuPy 13.6.0)")
    assert DeviceInfo(backend="numpy", name="CPU (x86_64, 8 threads)").describe() == "CPU (x86_64, 8 threads)"


def test_the_final_progress_line_is_printed_once(capsys, monkeypatch):
    """Not a terminal: a progress line at most every 2 s, and the final one. A last batch that
    came 2 s after the previous line printed its line, then the final line repeated it."""
    from nagare.app import headless

    clock = itertools.count(0.0, 3.0)  # every batch 3 s after the last: each passes the 2 s throttle
    monkeypatch.setattr(headless.time, "perf_counter", lambda: float(next(clock)))
    assert main(["run", "compact-advection1d", "--steps", "4", "--batch", "2", *SMALL_1D]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "steps/s" in ln]
    assert [ln.split("]")[1].split("steps")[0].strip() for ln in lines] == ["2/4", "4/4"], err


def test_a_run_stopped_early_ends_with_one_line(capsys, monkeypatch):
    """Ctrl-C or --seconds end the loop right after a batch whose line was printed: the final call
    for the same step count adds nothing (not a terminal; on one, the final line overwrites it)."""
    from types import SimpleNamespace

    from nagare.app import headless

    # no measured batch yet: no throughput part
    engine = SimpleNamespace(timings=SimpleNamespace(steps=0), time=0.75, time_units="s")

    clock = itertools.count(0.0, 3.0)
    monkeypatch.setattr(headless.time, "perf_counter", lambda: float(next(clock)))
    p = headless.Progress(100, quiet=False)
    p.tty = False
    p.update(30, engine)
    p.update(30, engine, final=True)
    assert capsys.readouterr().err.count("30/100 steps  t = 0.75 s  ") == 1


def test_a_row_stamped_at_an_earlier_step_keeps_that_step_and_time(tmp_path):
    """A caller that read the simulated time on the device passes the step it read it at: the row
    says that step and that time together, not the engine's later step."""
    import csv

    from nagare.app.timinglog import TimingLog
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("compact-advection1d", ["grid.nx=64"], "numpy"), get_backend("numpy"),
                      variants={"solver": "cr"})
    log = TimingLog(e, ["nagare", "test"], tmp_path / "t.csv")
    e.step(3)
    stamped_time = e.time
    e.step(2)
    row = log.record(at=(3, stamped_time))
    assert row["step"] == 3 and row["time"] == stamped_time
    log.close()
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert int(rows[-1]["step"]) == 3
    np.testing.assert_allclose(float(rows[-1]["time"]), stamped_time, rtol=1e-12)


def test_the_progress_line_gives_rates_with_a_prefix_that_fits():
    from nagare.app.headless import rate_text

    assert [rate_text(x) for x in (512.0, 3_870.0, 3.914e6, 1.2e9, 0.0)] == ["512", "3.87 k", "3.91 M", "1.2 G", "0"]


def test_an_npz_dump_says_what_each_field_is(tmp_path):
    """A dumped field's name is short ("u") while its values may be a scaled departure ("(u - u∞)/c∞"):
    the dump carries each field's label and units as the app shows them, and the time's units."""
    path = tmp_path / "f.npz"
    assert main(["run", "compact-vortex-outflow", "--backend", "numpy", "--set", "grid.nx=32", "--set", "grid.ny=32",
                 "--steps", "2", "--dump", str(path), "--quiet"]) == 0
    with np.load(path) as z:
        labels = json.loads(str(z["field_labels"][()]))
        assert str(z["time_units"][()]) == "l/c∞"
        assert labels["u"]["label"] == "(u - u∞)/c∞" and labels["pressure"]["label"] == "(p - p∞)/(ρ∞c∞²)"
        assert set(labels) <= set(z.files) | {k.split("/")[0] for k in z.files}


def test_a_long_run_says_how_long_is_left_and_the_final_line_how_long_it_took(capsys, monkeypatch):
    from types import SimpleNamespace

    from nagare.app import headless

    assert [headless.duration_text(x) for x in (4.4, 59.6, 185.0, 7620.0)] == ["4 s", "1 min 00 s", "3 min 05 s",
                                                                              "2 h 07 min"]
    engine = SimpleNamespace(timings=SimpleNamespace(steps=0), time=1.0, time_units="")
    clock = iter([0.0, 3.0, 20.0, 40.0])  # start; a line after 3 s (too early to say); after 20 s; final
    monkeypatch.setattr(headless.time, "perf_counter", lambda: next(clock))
    p = headless.Progress(100, quiet=False)
    p.tty = False
    p.update(5, engine)
    p.update(25, engine)  # 25 steps in 20 s: 75 steps left at 1.25 steps/s
    p.update(50, engine, final=True)
    lines = capsys.readouterr().err.splitlines()
    assert "left" not in lines[0]
    assert lines[1].endswith("~1 min 00 s left"), lines[1]
    assert lines[2].endswith("in 40 s") and "left" not in lines[2], lines[2]

"""Outputs that fail or collide, the way a user meets them: a real full disk (a small tmpfs, where
this machine lets the tests mount one), a real file-size limit (RLIMIT_FSIZE in a subprocess),
two options naming one file, and two runs writing the same outputs at once.

Every write site meets an injected ENOSPC and EFBIG in tests/unit/test_output_faults.py; here the
kernel says it, HDF5's own writes included."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from nagare.app.cli import main

SMALL = ["--set", "grid.nx=16", "--set", "grid.ny=16", "--set", "grid.nz=16", "--backend", "numpy"]
CAVITY = ["lbm2d-cavity", "--set", "grid.n=32", "--backend", "numpy"]
ROOT = Path(__file__).resolve().parents[2]


def _complete_log(folder: Path, stem: str = "t") -> int:
    """The timing log pair parses, every CSV row is whole, and both hold the same rows; their count."""
    rows = list(csv.reader(open(folder / f"{stem}.csv", newline="")))
    assert rows and all(len(r) == len(rows[0]) for r in rows), rows[-3:]
    doc = json.loads((folder / f"{stem}.json").read_text())
    assert len(doc["rows"]) == len(rows) - 1
    return len(rows) - 1


def _one_line_failures(err: str) -> list[str]:
    assert "Traceback" not in err and "HDF5-DIAG" not in err, err
    return [ln for ln in err.splitlines() if "not written" in ln or "NOT WRITTEN" in ln]


# ---- a full disk ----------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (skipped where mounting is not permitted: not root, or a container without it)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path, leave_kib: int) -> None:
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave_kib * 1024))


def test_a_timing_log_on_a_full_disk_is_one_line_and_keeps_no_broken_file(small_disk, capsys):
    _fill(small_disk, 0)
    status = main(["run", *CAVITY, "--steps", "20", "--timings", str(small_disk / "t.csv"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 4, err
    lines = _one_line_failures(err)
    assert any("timing log not written" in ln and "the disk is full" in ln and "no timing log was left" in ln
               for ln in lines), err
    assert not (small_disk / "t.csv").exists() and not (small_disk / "t.json").exists()
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporary or lock left


def test_a_disk_filling_mid_run_keeps_every_output_complete(small_disk, capsys):
    """Room for a few dumps: the dumps, the series, the checkpoint and the timing log each end as a
    complete file (or none); one line per kind of failure; exit 4."""
    _fill(small_disk, 96)
    status = main(["run", "diffusion3d", "--steps", "40", "--batch", "1", "--dump-every", "2",
                   "--dump-dir", str(small_disk / "d"), "--series", str(small_disk / "s.vtkhdf"),
                   "--timings", str(small_disk / "t.csv"), "--checkpoint", str(small_disk / "c.npz"),
                   "--checkpoint-every", "10", "--quiet", *SMALL])
    err = capsys.readouterr().err
    assert status == 4, err
    lines = _one_line_failures(err)
    for what in ("series not written", "dump not written", "timing log not written", "checkpoint at step"):
        assert any(what in ln and "the disk is full" in ln for ln in lines), (what, err)
    assert err.count("WARNING: checkpoint at step 40 NOT written") == 1  # the periodic one; not again at the end
    assert _complete_log(small_disk) >= 1
    for dump in (small_disk / "d").glob("*.npz"):
        with np.load(dump) as z:
            assert "step" in z.files
    if (small_disk / "c.npz").exists():
        from nagare.engine.checkpoint import load_checkpoint

        load_checkpoint(small_disk / "c.npz")
    if (small_disk / "s.vtkhdf").exists():
        import h5py

        with h5py.File(small_disk / "s.vtkhdf", "r") as f:
            assert int(f["VTKHDF/Steps"].attrs["NSteps"]) >= 1
    assert not [p.name for p in small_disk.rglob(".*")], "temporaries or locks left"


def test_a_vtkhdf_dump_on_a_full_disk_is_one_line_not_a_crash(small_disk):
    """HDF5 does not survive a write the disk refuses: the file's close crashed the process
    (SIGSEGV, h5py issue 914). In a child process, so a crash fails this test only."""
    _fill(small_disk, 8)
    code = "import sys; from nagare.app.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", code, "run", *CAVITY, "--steps", "4", "--quiet",
                        "--dump", str(small_disk / "d.vtkhdf")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, (r.returncode, r.stderr[-3000:])
    lines = _one_line_failures(r.stderr)
    assert any("dump not written" in ln and "the disk is full" in ln and "no d.vtkhdf was left" in ln
               for ln in lines), r.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporary or lock left


def test_a_video_on_a_full_disk_is_one_line_saying_so(small_disk):
    """ffmpeg writes the MP4 in its own process: its full disk reached the app as a broken pipe with
    ffmpeg's command line appended (a dialog of many lines that did not say why)."""
    from nagare.app.gui.export import ExportError, VideoRecorder

    _fill(small_disk, 256)
    rec = VideoRecorder(small_disk / "v.mp4", fps=10)
    noise = np.random.default_rng(0).integers(0, 256, (240, 320, 4), dtype=np.uint8)  # incompressible
    with pytest.raises(ExportError) as info:
        for _ in range(400):
            rec.append(noise)
            noise = np.roll(noise, 7, axis=1)
        rec.close()
    said = str(info.value)
    assert "\n" not in said, said
    assert "the disk is full (No space left on device)" in said and "no v.mp4 was left" in said, said
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporary or lock left


def test_rows_stop_whole_when_the_disk_fills(small_disk, capsys):
    _fill(small_disk, 40)
    status = main(["run", *CAVITY, "--steps", "600", "--batch", "1", "--timings", str(small_disk / "t.csv"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 4, err
    kept = _complete_log(small_disk)
    assert f"both keep the {kept} rows up to step" in err, err


# ---- a file-size limit ----------------------------------------------------------------------------
def _limited(limit: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        from nagare.app.cli import main
        sys.exit(main({argv!r}))
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_vtkhdf_dump_over_the_file_size_limit_is_one_line_and_keeps_the_old_one(tmp_path):
    (tmp_path / "d.vtkhdf").write_bytes(b"the previous dump")
    r = _limited(64 * 1024, ["run", "diffusion3d", "--steps", "4", "--dump", "d.vtkhdf", "--timings", "t.csv",
                             "--quiet", "--set", "grid.nx=40", "--set", "grid.ny=40", "--set", "grid.nz=40",
                             "--backend", "numpy"], tmp_path)
    assert r.returncode == 4, r.stderr
    lines = _one_line_failures(r.stderr)
    assert any("dump not written: cannot write d.vtkhdf: the file is larger than this process may write" in ln
               and "File too large" in ln and "the previous d.vtkhdf is kept unchanged" in ln for ln in lines), r.stderr
    assert (tmp_path / "d.vtkhdf").read_bytes() == b"the previous dump"
    assert _complete_log(tmp_path) >= 1  # the run's other outputs are written
    assert not [p.name for p in tmp_path.glob(".*")]


def test_a_timing_log_over_the_file_size_limit_keeps_whole_rows(tmp_path):
    r = _limited(24 * 1024, ["run", *CAVITY, "--steps", "300", "--batch", "1", "--timings", "t.csv", "--quiet"],
                 tmp_path)
    assert r.returncode == 4, r.stderr
    _one_line_failures(r.stderr)
    kept = _complete_log(tmp_path)
    assert f"both keep the {kept} rows up to step" in r.stderr, r.stderr
    assert r.stderr.count("timing log not written") == 1  # said once, not again when the log is closed


# ---- outputs of one run that collide ---------------------------------------------------------------
COLLISIONS = {
    "series and dump": (["--series", "same.vtkhdf", "--dump", "same.vtkhdf"], "--dump same.vtkhdf", "--series same"),
    "dump and checkpoint": (["--dump", "same.npz", "--checkpoint", "same.npz"], "--dump same.npz", "--checkpoint"),
    "checkpoint in the dump folder": (["--dump-every", "2", "--dump-dir", "d", "--checkpoint",
                                       "d/diffusion3d_00000002.npz"], "--dump-dir d", "--checkpoint d/diffusion3d"),
    "timing log's other half": (["--timings", "t.csv", "--checkpoint", "t.json"], "--timings t.csv (which also "
                                "writes t.json", "--checkpoint t.json"),
    "json half named": (["--timings", "t.json", "--checkpoint", "t.csv"], "--timings t.json", "--checkpoint t.csv"),
    "one file spelled two ways": (["--dump", "sub/../x.npz", "--checkpoint", "./x.npz"], "--dump sub/../x.npz",
                                  "--checkpoint x.npz"),
    "a frame's name": (["--frames", "f", "--checkpoint", "f/frame_00000000.png"], "--frames f", "--checkpoint"),
    "a file as the dump folder": (["--dump-every", "2", "--dump-dir", "out", "--checkpoint", "out"],
                                  "--checkpoint out", "--dump-dir out"),
}


@pytest.mark.parametrize("name", COLLISIONS)
def test_outputs_naming_one_file_are_refused_before_the_first_step(name, tmp_path, capsys, monkeypatch):
    args, first, second = COLLISIONS[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    status = main(["run", "diffusion3d", "--steps", "4", *args, *SMALL])
    err = capsys.readouterr().err
    assert status == 2, err
    refusal = [ln for ln in err.splitlines() if ln.startswith("nagare: ")]
    assert len(refusal) == 1 and first in refusal[0] and second in refusal[0], err
    assert "steps/s" not in err  # not one step was run
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not written, written


def test_a_symlink_to_another_output_is_the_same_file(tmp_path, capsys):
    (tmp_path / "a.npz").write_bytes(b"x")
    (tmp_path / "link.npz").symlink_to(tmp_path / "a.npz")
    status = main(["run", "diffusion3d", "--steps", "2", "--dump", str(tmp_path / "a.npz"),
                   "--checkpoint", str(tmp_path / "link.npz"), *SMALL])
    assert status == 2 and "would both write" in capsys.readouterr().err


def test_a_soak_s_json_and_its_timing_log_naming_one_file_are_refused(tmp_path, capsys):
    """--timings r.csv writes r.json too: a soak's --json r.json would be overwritten by it."""
    status = main(["soak", "diffusion3d", "--minutes", "0.01", "--backend", "numpy", "--json", str(tmp_path / "r.json"),
                   "--timings", str(tmp_path / "r.csv"), "--set", "grid.nx=16", "--set", "grid.ny=16",
                   "--set", "grid.nz=16"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "would both write" in err and "r.json" in err
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]


def test_the_octree_companion_of_a_dump_collides_with_a_series(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status = main(["run", "amr3d-periodic", "--backend", "numpy", "--steps", "1", "--dump", "q.vtkhdf",
                   "--series", "q_octree.vtkhdf"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "--dump q.vtkhdf (which also writes q_octree.vtkhdf: the octree's leaves) and --series q_octree.vtkhdf " \
           "would both write q_octree.vtkhdf" in err
    assert not list(tmp_path.iterdir())


def test_an_output_over_the_checkpoint_being_resumed_is_refused(tmp_path, capsys):
    ck = tmp_path / "c.npz"
    assert main(["run", "diffusion3d", "--steps", "2", "--checkpoint", str(ck), "--quiet", *SMALL]) == 0
    before = ck.read_bytes()
    assert main(["run", "-", "--resume", str(ck), "--steps", "2", "--dump", str(ck), "--backend", "numpy"]) == 2
    assert f"--dump {ck} would replace {ck}, the checkpoint --resume reads" in capsys.readouterr().err
    assert ck.read_bytes() == before
    # continuing a checkpoint in place is allowed
    assert main(["run", "-", "--resume", str(ck), "--steps", "2", "--checkpoint", str(ck), "--quiet",
                 "--backend", "numpy"]) == 0


def test_run_help_says_which_outputs_are_refused_together(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "outputs refused together" in out and "T.json" in out and "Q_octree.vtkhdf" in out and "PID" in out


# ---- two runs at once ------------------------------------------------------------------------------
def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < seconds, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_run_writing_the_same_outputs_is_refused_naming_the_first(tmp_path, capsys):
    first = subprocess.Popen([sys.executable, "-m", "nagare.app.cli", "run", *CAVITY, "--steps", "100000000",
                              "--timings", "t.csv", "--checkpoint", "c.npz", "--quiet"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp_path / ".t.json.lock", first)
        _wait_for(tmp_path / ".c.npz.lock", first)
        for args in (["--timings", str(tmp_path / "t.csv")], ["--dump", str(tmp_path / "c.npz")],
                     ["--checkpoint", str(tmp_path / "t.json")]):
            assert main(["run", *CAVITY, "--steps", "2", *args]) == 2
            err = capsys.readouterr().err
            assert f"is being written by another run, PID {first.pid}" in err, err
            assert "steps/s" not in err
    finally:
        first.terminate()  # SIGTERM: the first run stops after its batch and writes its checkpoint
        out, err = first.communicate(timeout=60)
    assert first.returncode == 143, err
    assert _complete_log(tmp_path) >= 1
    assert not list(tmp_path.glob(".*.lock"))  # released at the end


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ".t.csv.lock").write_text(f"{dead.stdout.strip()} 12345\n2026-01-01 00:00:00\nnagare run\n")
    assert main(["run", *CAVITY, "--steps", "2", "--timings", str(tmp_path / "t.csv"), "--quiet"]) == 0
    assert _complete_log(tmp_path) == 1
    assert not (tmp_path / ".t.csv.lock").exists()


def _hold(path: Path) -> subprocess.Popen:
    """Another process holding the lock on ``path`` until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from nagare.engine.outputlock import OutputLock
        OutputLock({str(path)!r}).acquire()
        print("held", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_app_s_exports_are_refused_while_another_process_writes_them(tmp_path):
    from nagare.app.atomic import ExportError
    from nagare.app.gui.export import VideoRecorder, save_png

    png, mp4 = tmp_path / "v.png", tmp_path / "v.mp4"
    holders = [_hold(png), _hold(mp4)]
    try:
        with pytest.raises(ExportError, match=f"another run, PID {holders[0].pid}"):
            save_png(np.zeros((4, 4, 4), np.uint8), png)
        with pytest.raises(ExportError, match=f"another run, PID {holders[1].pid}"):
            VideoRecorder(mp4)
        assert not png.exists() and not mp4.exists()
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=30)
    save_png(np.zeros((4, 4, 4), np.uint8), png)  # free again: written
    assert png.exists()


def test_a_headless_run_is_refused_an_output_the_app_is_recording(tmp_path, capsys):
    from nagare.app.gui.export import VideoRecorder

    rec = VideoRecorder(tmp_path / "v.mp4")  # this process holds it; a second process is refused
    try:
        r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", *CAVITY, "--steps", "2", "--dump",
                            str(tmp_path / "v.mp4.npz"), "--checkpoint", str(tmp_path / "v.mp4")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and f"PID {os.getpid()}" in r.stderr, r.stderr
    finally:
        rec.abort()

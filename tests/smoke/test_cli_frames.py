"""`nagare run --frames`: the options that only mean something with it, the final state's frame,
and a folder that holds another run's frames (docs/export.md, Frames)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from nagare.app.cli import main
from PIL import Image

SMALL = ["--set", "grid.nx=24", "--set", "grid.ny=16", "--set", "grid.nz=12", "--backend", "numpy", "--quiet"]


def _frames(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("frame_*.png"))


@pytest.mark.parametrize("option", [["--legend"], ["--every", "5"]])
def test_frame_options_without_frames_are_refused(tmp_path, capsys, option):
    """As --checkpoint-every without --checkpoint: one line, exit 2, nothing run."""
    assert main(["run", "diffusion3d", "--steps", "5", *option, "--dump", str(tmp_path / "d.npz"), *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nagare: {option[0]}") and "needs --frames DIR" in err[0], err
    assert not list(tmp_path.iterdir())


def test_the_final_state_gets_a_frame_whatever_the_period(tmp_path):
    """20 steps with a frame every 1000: frames 0 and 20 (the last one is the final state's field)."""
    fr = tmp_path / "fr"
    assert main(["run", "diffusion3d", "--steps", "20", "--every", "1000", "--frames", str(fr),
                 "--dump", str(tmp_path / "d.npz"), *SMALL]) == 0
    assert _frames(fr) == ["frame_00000000.png", "frame_00000020.png"]
    # the same steps with a period that lands on 20: the same last frame, not a second one
    assert main(["run", "diffusion3d", "--steps", "20", "--every", "10", "--frames", str(tmp_path / "ten"),
                 *SMALL]) == 0
    assert _frames(tmp_path / "ten") == ["frame_00000000.png", "frame_00000010.png", "frame_00000020.png"]
    np.testing.assert_array_equal(np.asarray(Image.open(fr / "frame_00000020.png")),
                                  np.asarray(Image.open(tmp_path / "ten" / "frame_00000020.png")))
    # 25 steps, the default period (a tenth: 2): …, 22, 24 and the last state, 25
    assert main(["run", "diffusion3d", "--steps", "25", "--frames", str(tmp_path / "dflt"), *SMALL]) == 0
    assert _frames(tmp_path / "dflt")[-3:] == ["frame_00000022.png", "frame_00000024.png", "frame_00000025.png"]


def test_a_dump_folder_without_a_period_gets_about_ten_and_the_last(tmp_path):
    """--dump-dir alone wrote nothing; it takes a period of a tenth of the run, as --series does, and
    the last state."""
    assert main(["run", "diffusion3d", "--steps", "25", "--dump-dir", str(tmp_path / "dd"), *SMALL]) == 0
    names = sorted(p.name for p in (tmp_path / "dd").iterdir())
    assert names[0] == "diffusion3d_00000002.npz" and names[-2:] == ["diffusion3d_00000024.npz",
                                                                      "diffusion3d_00000025.npz"]
    assert len(names) == 13


def test_a_frames_folder_of_another_run_is_refused(tmp_path, capsys):
    """New frames beside another run's (0/50/100 among 500/1000/1500) would mix the two: refused in one
    line before anything runs; the old frames stay as they were."""
    fr = tmp_path / "fr"
    assert main(["run", "diffusion3d", "--steps", "30", "--every", "15", "--frames", str(fr), *SMALL]) == 0
    before = {p.name: p.read_bytes() for p in fr.iterdir()}
    assert sorted(before) == ["frame_00000000.png", "frame_00000015.png", "frame_00000030.png"]
    assert main(["run", "diffusion3d", "--steps", "10", "--every", "5", "--frames", str(fr),
                 "--dump", str(tmp_path / "d.npz"), *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nagare: --frames {fr} already holds 3 frames of another run "
                                               "(frame_00000000.png … frame_00000030.png)"), err
    assert {p.name: p.read_bytes() for p in fr.iterdir()} == before
    assert not (tmp_path / "d.npz").exists()
    # other files in the folder are not frames: a folder with notes in it is taken
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.txt").write_text("x")
    (notes / "frame_1.png").write_text("x")  # not a frame name nagare writes
    assert main(["run", "diffusion3d", "--steps", "4", "--every", "2", "--frames", str(notes), *SMALL]) == 0


def test_a_resumed_run_adds_to_its_own_frames(tmp_path, capsys):
    """--resume from a checkpoint at step S continues the run: frames up to S are its own, and it adds
    the later ones (its first state's frame is the one already there). A frame past S was drawn by
    another run or after that checkpoint: refused."""
    fr, ck = tmp_path / "fr", tmp_path / "c.npz"
    assert main(["run", "diffusion3d", "--steps", "20", "--every", "10", "--frames", str(fr), "--checkpoint", str(ck),
                 *SMALL]) == 0
    first = (fr / "frame_00000020.png").stat().st_mtime_ns
    assert main(["run", "-", "--resume", str(ck), "--steps", "20", "--every", "10", "--frames", str(fr),
                 "--checkpoint", str(ck), "--backend", "numpy", "--quiet"]) == 0
    assert _frames(fr) == [f"frame_{s:08d}.png" for s in (0, 10, 20, 30, 40)]
    assert (fr / "frame_00000020.png").stat().st_mtime_ns == first  # not drawn again
    # the checkpoint is at 40 now; one at 20 with frames up to 40 beside it: those past 20 are not its run's
    assert main(["run", "diffusion3d", "--steps", "20", "--checkpoint", str(tmp_path / "c20.npz"), *SMALL]) == 0
    capsys.readouterr()
    assert main(["run", "-", "--resume", str(tmp_path / "c20.npz"), "--steps", "5", "--frames", str(fr),
                 "--backend", "numpy", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--frames {fr} holds 2 frames past step 20" in err[0], err
    assert "frame_00000030.png … frame_00000040.png" in err[0]
    assert _frames(fr) == [f"frame_{s:08d}.png" for s in (0, 10, 20, 30, 40)]


def test_a_frames_folder_that_does_not_exist_yet_is_made(tmp_path):
    """The checks before the run make nothing; the run makes the folders it writes into."""
    fr = tmp_path / "a" / "b"
    assert main(["run", "diffusion3d", "--steps", "2", "--every", "1", "--frames", str(fr), *SMALL]) == 0
    assert _frames(fr) == [f"frame_{s:08d}.png" for s in (0, 1, 2)]
    assert os.path.isdir(fr)

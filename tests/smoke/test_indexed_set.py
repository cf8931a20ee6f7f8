"""`nagare run … --set 'body[0].diameter=…'` on a CPU run: the preset's advertised knob is taken (the
[cpu_overrides] body edited), the sub-cell check refuses a sphere too small in its own one line, and
a bad index is blamed on the --set option."""
from __future__ import annotations

from nagare.app.cli import main

RUN = ["run", "amr3d-sphere-re20", "--backend", "numpy", "--steps", "1", "--quiet"]


def test_a_tiny_sphere_is_refused_by_the_sub_cell_check(capsys):
    assert main([*RUN, "--set", "body[0].diameter=0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "body[0].diameter: got 0.1" in err[0], err
    assert "make body[0].diameter at least 0.25" in err[0] and "unknown key" not in err[0], err


def test_a_bad_index_is_blamed_on_the_set_option(capsys):
    assert main([*RUN, "--set", "body[2].level=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nagare: --set body[2].level=3: "), err
    assert "'body' has 1 item" in err[0], err


def test_a_larger_sphere_runs(capsys):
    assert main([*RUN, "--set", "body[0].diameter=3.0"]) == 0

"""`nagare bench --with AXIS=CHOICE`: a choice added to every measured cell (e.g. graph=on with every
other choice of the Navier–Stokes step), labelled, without cells that would repeat another."""
import pytest
from nagare.app.cli import main as cli_main
from nagare.engine import bench, registry
from nagare.engine.backend import get_backend
from nagare.engine.bench import case_preset, parse_with, selections
from nagare.engine.errors import NagareError
from nagare.engine.families import engine_class


def _ns_preset():
    spec = engine_class("compact").bench_spec()
    return case_preset(spec, dict(spec.cases("numpy"))["ns-vortex-64-fp64"])


def test_with_adds_the_choice_to_every_cell_and_drops_the_cells_of_its_axis():
    preset = _ns_preset()
    plain = selections("compact", "numpy", preset)
    extra = parse_with("compact", ["batching=grouped"])
    got = selections("compact", "numpy", preset, extra)
    base = registry.default_selection("compact", "numpy")
    assert got, "no cell left"
    assert all(lbl.endswith(" + batching=grouped") and sel["batching"] == "grouped" for lbl, sel in got)
    # every plain cell that leaves batching alone is there, with the choice added; the others are not
    want = [(lbl + " + batching=grouped", dict(sel, batching="grouped")) for lbl, sel in plain
            if sel["batching"] == base["batching"]]
    assert got == want
    assert len(got) < len(plain)


@pytest.mark.parametrize("item, says", [("batching", "AXIS=CHOICE"), ("nonsense=on", "AXIS=CHOICE"),
                                        ("batching=sideways", "no choice 'sideways'")])
def test_a_bad_with_is_one_error_naming_it(item, says):
    with pytest.raises(NagareError, match=says):
        parse_with("compact", [item])


def test_run_bench_measures_the_cells_with_the_choice(monkeypatch):
    seen = []

    def fake_measure(engine, warmup_steps, batch, min_time, max_steps, min_steps=0):
        seen.append(dict(engine.selection))
        return {"steps": batch, "ms_per_step": 1.0, "updates_per_s": 1.0, "gbytes_per_s": 1.0,
                "roofline_pct": 0.0, "phases": {}, "extra": {}}

    monkeypatch.setattr(bench, "measure", fake_measure)
    results = bench.run_bench("compact", get_backend("numpy"), cases=["ns-vortex-64-fp64"], only=["default"],
                              with_choices={"batching": "per-variable"})
    assert [(r.label, r.ok) for r in results] == [("default + batching=per-variable", True)]
    assert [s["batching"] for s in seen] == ["per-variable"]


def test_the_cli_refuses_with_where_the_bench_has_no_variant_matrix(capsys):
    assert cli_main(["bench", "stencil", "--backend", "numpy", "--with", "graph=on"]) != 0
    assert "--with applies to a family's variant matrix" in capsys.readouterr().err

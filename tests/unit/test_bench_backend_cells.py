"""``nagare bench compact --backend numpy``: every solver NumPy runs is measured there with NumPy's
own right-hand side; the GPU's companion kernel = cuda is added only where the backend runs it, and
a CUDA-only choice is a cell listed unavailable with its reason."""
from __future__ import annotations

from nagare.engine import registry
from nagare.engine.backend import get_backend
from nagare.engine.bench import case_preset, run_bench, selections
from nagare.engine.families import engine_class, family_module

FAMILY = "compact"


def _cells(backend: str):
    family_module(FAMILY)
    spec = engine_class(FAMILY).bench_spec()
    preset = case_preset(spec, spec.cases(backend)[0][1])
    return preset, selections(FAMILY, backend, preset)


def test_numpy_cells_add_no_companion_numpy_cannot_run():
    _, cells = _cells("numpy")
    axes = registry.axes(FAMILY)
    base = registry.default_selection(FAMILY, "numpy")
    for label, sel in cells:
        changed = {a: c for a, c in sel.items() if c != base[a]}
        companions = {a: c for a, c in changed.items() if not label.startswith(f"{a}=")}
        for axis, choice in companions.items():
            assert "numpy" in axes[axis].choices[choice].backends, (label, axis, choice)


def test_every_solver_numpy_runs_is_an_available_numpy_cell():
    preset, cells = _cells("numpy")
    axes = registry.axes(FAMILY)
    by_solver: dict = {}
    for _, sel in cells:  # the first cell of each solver: its own (the default's, for the default solver)
        by_solver.setdefault(sel["solver"], sel)
    for name, choice in axes["solver"].choices.items():
        sel = by_solver[name]
        reasons = [registry.unavailable_reason(axes[a].choices[c], "numpy", sel, preset) for a, c in sel.items()]
        reasons = [r for r in reasons if r]
        if "numpy" in choice.backends:
            assert sel["kernel"] == "array" and not reasons, (name, sel, reasons)
        else:  # gtsv2 (cuSPARSE): listed, with the reason
            assert reasons and all("CUDA GPU" in r for r in reasons), (name, reasons)


def test_gpu_solver_cells_still_pair_the_cuda_right_hand_side():
    _, cells = _cells("cupy")
    labels = [label for label, _ in cells]
    assert "solver=cr,kernel=cuda" in labels and "solver=bicgstab,kernel=cuda" in labels, labels


def test_a_numpy_bench_measures_a_cpu_solver_and_refuses_a_cuda_only_one():
    family_module(FAMILY)
    spec = engine_class(FAMILY).bench_spec()
    case = spec.cases("numpy")[0][0]
    results = {r.label: r for r in run_bench(FAMILY, get_backend("numpy"), cases=[case], min_time=0.01,
                                             warmup_steps=1, batch=2, max_steps=4,
                                             only=["solver=pcr", "solver=gtsv2"])}
    assert set(results) == {"solver=pcr", "solver=gtsv2"}, list(results)
    assert results["solver=pcr"].ok and results["solver=pcr"].selection["kernel"] == "array"
    assert results["solver=pcr"].ms_per_step > 0
    assert not results["solver=gtsv2"].ok and results["solver=gtsv2"].reason == "needs a CUDA GPU (CuPy backend)"


def test_a_cell_refused_for_the_same_reason_in_every_case_is_one_row_after_the_measured_ones():
    """diffusion3d on NumPy: its CUDA kernels cannot run in any case — one row each, labelled
    "every case (N)", after the measured cells, not N rows repeating the reason."""
    family_module("diffusion3d")
    cases = ["16x16x16", "8x16x32"]
    results = run_bench("diffusion3d", get_backend("numpy"), cases=cases, min_time=0.01, warmup_steps=1, batch=2,
                        max_steps=4)
    refused = [r for r in results if not r.ok]
    assert refused and all(r.case == "every case (2)" and "CUDA GPU" in r.reason for r in refused)
    assert len({r.label for r in refused}) == len(refused)
    assert [r.ok for r in results] == sorted((r.ok for r in results), reverse=True)  # measured rows first
    assert {r.case for r in results if r.ok} == set(cases)
    one = run_bench("diffusion3d", get_backend("numpy"), cases=cases[:1], min_time=0.01, warmup_steps=1, batch=2,
                    max_steps=4)
    assert {r.case for r in one if not r.ok} == {cases[0]}  # one case: its own label

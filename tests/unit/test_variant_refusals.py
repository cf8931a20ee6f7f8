"""Refusals that send the user the right way (issue 40): a variant that cannot run names what does run
on this machine (another choice of its axis, or --backend cupy only where a CUDA GPU is usable), and
the refusal names the requested choice, not an axis it merely conflicts with; the same axis or key
given twice, differently, is refused naming both instead of the last one winning silently."""
from __future__ import annotations

import re

import pytest
from nagare.app.cli import main
from nagare.engine import registry
from nagare.engine.errors import PresetError, VariantUnavailable
from nagare.engine.families import FAMILIES, engine_class
from nagare.engine.presets import apply_overrides, refuse_conflicting_overrides


def _config(family):
    return next(iter(engine_class(family).equivalence_presets().values()))


def _every_refusal(family, backend):
    config = _config(family)
    for axis, ax in registry.axes(family).items():
        for name in ax.choices:
            try:
                registry.resolve_selection(family, backend, config, getattr(config, "variants", None),
                                           requested={axis: name})
            except VariantUnavailable as exc:
                yield axis, name, str(exc), config


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_numpy_refusal_names_a_remedy_that_runs_here(family, monkeypatch):
    """Walk the registry: each choice refused on NumPy (no GPU) is named, with the choices of its
    axis that run here; every "choose A = C" in the line names a choice that runs here; no line
    sends the user to --backend cupy on a machine without a GPU."""
    monkeypatch.setattr(registry, "_gpu_present", lambda: False)
    seen = 0
    for axis, name, msg, config in _every_refusal(family, "numpy"):
        seen += 1
        assert msg.startswith(f"variant {axis}={name} cannot run here: "), msg
        assert "what runs here:" in msg or "no other" in msg, msg
        assert "--backend cupy" not in msg and "\n" not in msg, msg
        sel = registry.resolve_selection(family, "numpy", config)
        for a, c in re.findall(r"(?:choose|what runs here:) ([\w-]+) = ([\w-]+)", msg):
            fam = registry.axes(family)
            assert registry.unavailable_reason(fam[a].choices[c], "numpy", {**sel, a: c}, config) is None, (msg, a, c)
    if any(c.backends == {"cupy"} for c in registry.all_choices() if c.family == family):
        assert seen


def test_a_gpu_only_choice_on_numpy_names_the_cupy_backend_only_where_a_gpu_is(monkeypatch):
    config = _config("lbm2d")
    for gpu, words in ((True, "--backend cupy runs it"), (False, "this machine has no usable CUDA GPU")):
        monkeypatch.setattr(registry, "_gpu_present", lambda gpu=gpu: gpu)
        with pytest.raises(VariantUnavailable, match=re.escape(words)):
            registry.resolve_selection("lbm2d", "numpy", config, requested={"kernel": "fused"})


def test_compacts_fused_kernel_on_numpy_is_refused_as_itself(capsys, monkeypatch):
    """The issue's line: `--variant kernel=fused` on NumPy was refused as solver=thomas with "choose
    kernel = cuda first", another GPU-only choice."""
    monkeypatch.setattr(registry, "_gpu_present", lambda: False)
    assert main(["run", "compact-advection1d", "--steps", "1", "--variant", "kernel=fused", "--backend", "numpy",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "variant kernel=fused cannot run here: needs a CUDA GPU" in err[0], err
    assert "kernel = cuda" not in err[0] and "what runs here: kernel = array" in err[0], err


@pytest.mark.parametrize("argv, words", [
    (["--variant", "kernel=array", "--variant", "kernel=stencil-host"],
     "--variant kernel=array and --variant kernel=stencil-host"),
    (["--set", "variants.kernel=array", "--variant", "kernel=stencil-host"],
     "--set variants.kernel=array and --variant kernel=stencil-host"),
    (["--set", "grid.nx=24", "--set", "grid.nx=32"], "--set grid.nx=24 and --set grid.nx=32"),
    (["--set", "physics.r=0.1", "--set", "physics={r=0.15}"], "--set physics.r=0.1 and --set physics={r=0.15}"),
])
def test_the_same_axis_or_key_twice_is_refused_naming_both(capsys, argv, words):
    assert main(["run", "diffusion3d", "--steps", "1", "--backend", "numpy", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "given twice" in err[0], err


def test_the_same_choice_twice_is_no_conflict(capsys):
    assert main(["run", "diffusion3d", "--steps", "1", "--backend", "numpy", "--quiet",
                 "--set", "grid.nx=16", "--set", "grid.nx=16", "--variant", "kernel=array",
                 "--variant", "kernel=array", "--set", "variants.kernel=array"]) == 0


@pytest.mark.parametrize("overrides, conflict", [
    (["grid.n=64", "grid.n=128"], True),
    (["grid.n=64", "grid={m=9}"], True),           # the table replaces the key given before
    (["grid={n=64}", "grid.n=128"], True),         # the key contradicts the table given before
    (["grid={n=64}", "grid.m=9"], False),          # a key the table did not name
    (["grid.n=64", "grid.n=64"], False),
    (["grid.n=64", "physics.n=128"], False),
    (["grid.n=64", "grid={n=64, m=9}"], False),
])
def test_override_conflicts(overrides, conflict):
    if conflict:
        with pytest.raises(PresetError, match="given twice, differently") as exc:
            refuse_conflicting_overrides(overrides)
        assert all(o in str(exc.value) for o in overrides)
    else:
        refuse_conflicting_overrides(overrides)


def test_code_that_composes_overrides_still_gets_the_last():
    """Only a user's command line is held to "once": code builds a base list and its changes."""
    assert apply_overrides({}, ["grid.n=64", "grid.n=128"]) == {"grid": {"n": 128}}


def test_soak_refuses_a_key_given_twice_too(capsys):
    assert main(["soak", "diffusion3d", "--minutes", "1", "--backend", "numpy",
                 "--set", "grid.nx=24", "--set", "grid.nx=32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--set grid.nx=24 and --set grid.nx=32" in err[0], err


@pytest.mark.parametrize("backend, remedy", [("numpy", "use reference"),
                                             ("cupy", "use reference or two-kernel or fused")])
def test_decomposed_temporal_blocking_names_kernels_of_the_backend_at_hand(backend, remedy):
    from nagare.engine.lbm2d.decomp_adapter import LBM2DSlabs

    msg = LBM2DSlabs.unavailable({"kernel": "srtb"}, backend)
    assert msg.endswith(remedy), msg


def test_an_unknown_choice_lists_what_runs_here_first(capsys):
    """`--variant kernel=fused` where the axis has no such choice: the list of choices separates those
    of the backend at hand from the GPU-only ones, so it offers no GPU-only choice as the fix."""
    assert main(["run", "diffusion3d", "--steps", "1", "--backend", "numpy", "--quiet",
                 "--variant", "kernel=fused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert ("unknown choice 'fused' for variant axis 'kernel' of diffusion3d; allowed here: array, stencil-host "
            "(also, on the cupy backend with a CUDA GPU: cuda,") in err[0], err

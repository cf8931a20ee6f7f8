"""Domain decomposition (engine/decomp) on NumPy: N sub-domains give the undecomposed run's fields
bit for bit, with overlap off and on, through checkpoints written with another N, for diffusion3d,
wave2d and lbm2d. (The same on one CuPy device and through NCCL: tests/unit/test_decomp_gpu.py.)
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.checkpoint import load_checkpoint, save_checkpoint
from nagare.engine.decomp import DecompError, decomposed_class, make_transport, split_rows
from nagare.engine.decomp.common import Slab, ghost_copies, overlap_regions
from nagare.engine.errors import VariantUnavailable

NUMPY = get_backend("numpy")
PARTS = (1, 2, 3, 4)


def diffusion(bc, **kw):
    from nagare.engine.diffusion3d import Preset

    # nz = 13: divisible by none of 2, 3, 4; odd nx, ny
    return Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": {"nx": 9, "ny": 7, "nz": 13},
                                  "boundaries": {"kind": bc}, "initial": {"kind": "random", "seed": 3}, **kw})


def wave(bc, **kw):
    from nagare.engine.wave2d import Preset

    return Preset.model_validate({"engine": "wave2d", "description": "t", "grid": {"nx": 11, "ny": 13},
                                  "boundaries": {"kind": bc}, "initial": {"kind": "random", "seed": 4}, **kw})


LBM_CASES = {
    "periodic": {"initial": {"kind": "taylor-green"}},
    "walls-lid": {"boundaries": {"x": "walls", "y": "lid"}},
    "obstacle-force": {"boundaries": {"x": "periodic", "y": "walls"},
                       "obstacle": {"kind": "circle", "diameter": 5, "center": [0.3, 0.45]},
                       "physics": {"tau": 0.7, "force": [2e-5, 0.0]}, "initial": {"kind": "uniform"}},
    "inlet-outlet": {"boundaries": {"x": "inlet-outlet", "y": "walls"},
                     "obstacle": {"kind": "rectangle", "width": 3, "height": 4},
                     "initial": {"kind": "uniform", "kick": 0.3}},
    "trt-tracers": {"boundaries": {"x": "inlet-outlet", "y": "walls"}, "physics": {"tau": 0.6, "collision": "trt"},
                    "tracers": {"count": 40, "rate": 5, "every": 3}},
}


def lbm(case, precision="fp32"):
    from nagare.engine.lbm2d import Preset

    c = LBM_CASES[case]
    physics = {"tau": 0.8, **c.get("physics", {}), "precision": precision}
    return Preset.model_validate({"engine": "lbm2d", "description": "t", "grid": {"nx": 24, "ny": 17},
                                  **{k: v for k, v in c.items() if k != "physics"}, "physics": physics})


def engine(preset, **kw):
    from nagare.engine.families import create_engine

    return create_engine(preset, NUMPY, **kw)


def state(e):
    return {k: np.array(v, copy=True) for k, v in e.state_arrays().items()}


def assert_same(got, want, what=""):
    assert set(got) == set(want), what
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{what} {k}")


def straight(preset, steps, variants=None):
    e = engine(preset, variants=variants)
    assert not getattr(e, "_decomposed", False)
    e.step(steps)
    return state(e)


# ---- the pieces ------------------------------------------------------------------------------
def test_split_rows_balances_and_refuses_too_many_parts():
    assert split_rows(13, 4) == [(0, 4), (4, 7), (7, 10), (10, 13)]
    assert split_rows(8, 1) == [(0, 8)]
    with pytest.raises(DecompError, match="cannot be split into 5 sub-domains of at least 2 rows"):
        split_rows(9, 5, min_rows=2)


def test_ghost_copies_wrap_and_overlap_regions():
    slabs = [Slab(0, 0, 3, -1, 4, 1), Slab(1, 3, 5, 2, 6, 1)]
    # part 0's lower ghost = global row 4 (part 1's local 2), its upper = row 3 (part 1's local 1) ...
    assert ghost_copies(slabs, 5) == [(1, slice(2, 3), 0, slice(0, 1)), (1, slice(1, 2), 0, slice(4, 5)),
                                      (0, slice(3, 4), 1, slice(0, 1)), (0, slice(1, 2), 1, slice(3, 4))]
    assert overlap_regions(8, 1, True, True) == ([(1, 2), (6, 7)], [(2, 6)])
    assert overlap_regions(8, 1, False, True) == ([(6, 7)], [(1, 6)])
    assert overlap_regions(4, 1, True, True) == ([(1, 3)], [])  # thin: all boundary
    assert overlap_regions(2, 1, True, True) == ([], [])


# ---- the stencil families ----------------------------------------------------------------------
@pytest.mark.parametrize("bc", ["periodic", "fixed"])
@pytest.mark.parametrize("kernel", ["array", "stencil-host"])
@pytest.mark.parametrize("make", [diffusion, wave], ids=["diffusion3d", "wave2d"])
def test_stencil_family_sub_domains_match_the_whole_grid_bit_for_bit(make, kernel, bc):
    p = make(bc)
    want = straight(p, 7, {"kernel": kernel})
    for n in PARTS:
        for overlap in ("off", "on"):
            e = engine(p, variants={"kernel": kernel}, parts=n, overlap=overlap)
            e.step(3)
            e.step(4)
            assert e.step_count == 7 and e.time == pytest.approx(7 * e.dt)
            assert_same(state(e), want, f"{p.engine} {kernel} {bc} N={n} overlap={overlap}")


def test_a_dropped_halo_copy_or_pad_refill_is_caught():
    """The comparison can fail: a decomposition missing one halo copy, or the pad refill, differs."""
    p = diffusion("periodic")
    want = straight(p, 5)
    e = engine(p, parts=3)
    e.adapter.copies = e.adapter.copies[:-1]
    e.step(5)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(state(e)["f"], want["f"])
    e = engine(p, parts=2, overlap="on")
    e.adapter._wrap_pads = lambda *a: None
    e.step(5)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(state(e)["f"], want["f"])


# ---- lbm2d ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(LBM_CASES))
@pytest.mark.parametrize("storage,precision", [("native", "fp32"), ("fp16", "fp32"), ("native", "fp64")])
def test_lbm2d_sub_domains_match_the_whole_grid_bit_for_bit(case, storage, precision):
    p = lbm(case, precision)
    variants = {"storage": storage}
    want = straight(p, 8, variants)
    for n in PARTS:
        for overlap in ("off", "on"):
            e = engine(p, variants=variants, parts=n, overlap=overlap)
            e.step(5)
            e.step(3)
            assert_same(state(e), want, f"{case} {storage} {precision} N={n} overlap={overlap}")


def test_lbm2d_fields_diagnostics_and_a_live_switch_match():
    p = lbm("obstacle-force")
    ref = engine(p)
    e = engine(p, parts=3)
    for x in (ref, e):
        x.step(4)
        x.set_variant(storage="fp16")  # the global state is gathered, converted, scattered again
        x.step(3)
    e.set_variant(overlap="on")
    e.step(2)
    ref.step(2)
    assert e.variants["overlap"]["current"] == "on" and e.selection == ref.selection
    assert_same(state(e), state(ref), "after a storage switch")
    for name in ref.field_names():
        np.testing.assert_array_equal(np.asarray(e.field(name).data), np.asarray(ref.field(name).data), err_msg=name)
    assert e.diagnostics() == ref.diagnostics()
    np.testing.assert_array_equal(e.canonical_state(), ref.canonical_state())


def test_lbm2d_aa_exchange_matches_the_whole_grid_with_emulated_aa_steps():
    """The AA exchange (fix-up of the edge rows after a P→Q step, ghost refresh after Q→P) with
    the AA kernel's slot pattern emulated on NumPy (test_lbm2d_aa_layout.aa_step): N slabs give the
    whole grid's stored lattice bit for bit, in both layouts. (The CUDA kernel: the gpu tests.)"""
    from nagare.engine.lbm2d.d2q9 import OPP
    from nagare.engine.lbm2d.storage import LatticeState

    from tests.unit.test_lbm2d_aa_layout import aa_step

    class EmulatedAA:
        def __init__(self, ctx):
            self.ctx = ctx

        def step(self, st):
            aa_step(st.f, self.ctx.mask_host, self.ctx.lat, from_p=st.layout == "P")
            st.layout = "Q" if st.layout == "P" else "P"

        def reset(self):
            pass

    for case in ("walls-lid", "obstacle-force"):
        p = lbm(case, "fp64")
        whole = engine(p)
        whole.random_state(np.random.default_rng(5))
        a0 = np.ascontiguousarray(np.asarray(whole.state_arrays()["f"])[OPP])  # layout P
        want, layouts = a0.copy(), []
        for step in range(5):
            aa_step(want, whole.mask_host, whole.lat, from_p=step % 2 == 0)
            layouts.append("Q" if step % 2 == 0 else "P")
            for n in PARTS:
                e = engine(p, parts=n)
                ad = e.adapter
                ad.aa, ad.reference = True, False
                ad.aa_fixups = ad._aa_fixups()
                e.state = LatticeState(a0.copy(), None, "P", None)
                ad.scatter()
                ad.steppers = [EmulatedAA(c) for c in ad.ctx]
                ad.advance(step + 1, overlap=False)
                ad.gather()
                assert e.state.layout == layouts[-1]
                np.testing.assert_array_equal(e.state.f, want, err_msg=f"{case} N={n} after {step + 1} AA steps")
            if step == 1:  # and without the fix-up the Q layout is wrong: the test can fail
                e = engine(p, parts=2)
                e.adapter.aa, e.adapter.reference, e.adapter.aa_fixups = True, False, []
                e.state = LatticeState(a0.copy(), None, "P", None)
                e.adapter.scatter()
                e.adapter.steppers = [EmulatedAA(c) for c in e.adapter.ctx]
                e.adapter.advance(1, overlap=False)
                e.adapter.gather()
                q = a0.copy()
                aa_step(q, whole.mask_host, whole.lat, from_p=True)
                assert not np.array_equal(e.state.f, q)


def test_lbm2d_temporal_blocking_is_refused_with_the_reason():
    from nagare.engine.lbm2d.decomp_adapter import LBM2DSlabs

    assert "temporal blocking is not decomposed" in LBM2DSlabs.unavailable({"kernel": "srtb"}, "cupy")
    assert LBM2DSlabs.unavailable({"kernel": "fused"}, "cupy") is None


# ---- checkpoints: whole, resumable on any N --------------------------------------------------------
@pytest.mark.parametrize("make,kw", [(diffusion, {"bc": "fixed"}), (wave, {"bc": "periodic"}),
                                     (lbm, {"case": "trt-tracers"}), (lbm, {"case": "walls-lid"})],
                         ids=["diffusion3d", "wave2d", "lbm2d-tracers", "lbm2d-lid"])
def test_checkpoint_written_with_two_parts_resumes_on_three_bit_for_bit(make, kw, tmp_path):
    p = make(**kw)
    want = straight(p, 9)
    first = engine(p, parts=2)
    first.step(4)
    save_checkpoint(first.checkpoint(), tmp_path / "n2.npz")
    ckpt = load_checkpoint(tmp_path / "n2.npz")
    plain = engine(p)
    plain.step(4)
    assert_same(ckpt["arrays"], state(plain), "the checkpoint is the whole, gathered state")
    assert "decomp" not in ckpt["meta"]["preset"]  # independent of N
    for n in (3, 1, 4):
        e = engine(p, parts=n, overlap="on" if n == 3 else "off")
        e.restore(ckpt)
        e.step(5)
        assert e.step_count == 9
        assert_same(state(e), want, f"resume N=2 -> N={n}")
    undecomposed = engine(p)
    undecomposed.restore(ckpt)
    undecomposed.step(5)
    assert_same(state(undecomposed), want, "resume N=2 -> undecomposed")


# ---- the preset key, the transports ------------------------------------------------------------------
def test_preset_key_builds_the_decomposed_engine_and_is_not_dumped():
    from nagare.engine.presets import raw_dict, validate

    raw = {"engine": "wave2d", "description": "t", "grid": {"nx": 11, "ny": 13}, "initial": {"kind": "random"}}
    p = validate(raw, "<test>", "numpy", ["decomp.parts=3", "decomp.overlap=on"])
    assert p.decomp.parts == 3 and "decomp" not in raw_dict(p)
    assert p.content_hash == validate(raw, "<test>", "numpy").content_hash
    from nagare.engine.wave2d.decomp_adapter import Wave2DSlabs
    from nagare.engine.wave2d.engine import Wave2D

    e = engine(p)
    assert type(e) is decomposed_class(Wave2D, Wave2DSlabs) and isinstance(e, Wave2D) and e.family == "wave2d"
    assert e.parts == 3 and e.overlap == "on"
    e.step(2)
    assert e.timings.extra["decomp"]["rows"] == [(0, 5), (5, 9), (9, 13)]
    assert e.timings.extra["decomp"]["transport"] == "same-device"
    assert not getattr(engine(validate(raw, "<test>", "numpy")), "_decomposed", False)


def test_too_many_parts_and_nccl_without_gpus_are_one_line_errors():
    with pytest.raises(DecompError, match="decomp.parts = 14: grid.ny = 13 y rows cannot be split into 14"):
        engine(wave("periodic"), parts=14)
    with pytest.raises(DecompError, match="NCCL transport for 2 parts: NCCL needs the CuPy backend"):
        make_transport("nccl", NUMPY, 2)
    t = make_transport("auto", NUMPY, 2)
    assert t.name == "same-device" and t.tested
    from nagare.engine.decomp import NcclTransport

    assert NcclTransport.tested  # checked on 2 and 4 GPUs by test_decomp_gpu.py (docs/decisions.md D28)
    with pytest.raises(VariantUnavailable, match="overlap="):
        engine(wave("periodic"), parts=2).set_variant(overlap="sometimes")


def test_bench_scale_skeleton_reports_sub_domains_on_one_device():
    from nagare.engine.decomp.bench import markdown, scale_rows

    rows = scale_rows(NUMPY, (1, 2), overlaps=("off",), steps=1)
    assert {(r["mode"], r["family"], r["parts"]) for r in rows} == {
        ("weak", "lbm2d", 1), ("weak", "lbm2d", 2), ("weak", "diffusion3d", 1), ("weak", "diffusion3d", 2),
        ("strong", "lbm2d", 1), ("strong", "lbm2d", 2)}
    two = [r for r in rows if r["parts"] == 2]
    assert all(r["transport"] == "same-device" and r["devices"] == 1 and r["mlups"] > 0 for r in two)
    assert "| weak | lbm2d | 128x128 | 2 | off | same-device | 1 |" in markdown(rows)


def test_region_size_and_the_refused_choices_in_variants():
    from nagare.engine.decomp.transport import region_size

    a = np.empty((9, 7, 5))
    for index in [(slice(2, 4),), (slice(None), slice(0, 1)), ([1, 4, 7], slice(3, 7), slice(None))]:
        assert region_size(a.shape, index) == a[index].size
    e = engine(lbm("walls-lid"), parts=2)
    with pytest.raises(VariantUnavailable, match="kernel=srtb with 2 sub-domains: temporal blocking is not decomposed"):
        e.set_variant(kernel="srtb")
    assert e.variants["kernel"]["choices"]["reference"] is None
    assert e.estimated_bytes() == 2 * engine(lbm("walls-lid")).estimated_bytes()


# ---- decomp.parts refused by the loader, naming the option, the preset and the axis (audit D11) ----
def test_the_split_axes_match_the_adapters():
    """Each decomposable preset's split axis (what the loader checks) is what its adapter splits."""
    from nagare.engine.decomp import DecomposablePreset
    from nagare.engine.decomp.stencil import StencilAdapter
    from nagare.engine.families import FAMILIES, decomp_adapter, decomposable_families, preset_model
    from nagare.engine.lbm2d import decomp_adapter as lbm_adapter

    assert decomposable_families() == ["diffusion3d", "lbm2d", "wave2d"]
    for fam in FAMILIES:  # every decomposed family has a split axis and a halo, and only those
        assert issubclass(preset_model(fam), DecomposablePreset) == (decomp_adapter(fam) is not None), fam
    for fam in ("diffusion3d", "wave2d"):
        adapter = decomp_adapter(fam)
        assert issubclass(adapter, StencilAdapter)
        assert preset_model(fam).decomp_split.halo == max(int(adapter.spec.stencil.halo[-1]), 1), \
            f"{fam}: halo along the split axis"
    assert preset_model("lbm2d").decomp_split.halo == lbm_adapter.H, "lbm2d: ghost rows per side"
    for preset in (diffusion("periodic"), wave("periodic"), lbm("periodic")):
        key = preset.decomp_split.key
        assert preset.shape[0] == getattr(preset.grid, key), f"{preset.engine}: the slowest axis is grid.{key}"


@pytest.mark.parametrize("name,over,fragment", [
    ("diffusion3d", ["grid.nz=8", "decomp.parts=9"], "decomp.parts = 9: grid.nz = 8 z planes cannot be split into 9"),
    ("wave2d", ["grid.ny=6", "decomp.parts=7"], "decomp.parts = 7: grid.ny = 6 y rows cannot be split into 7"),
    ("lbm2d-cavity", ["grid.n=8", "decomp.parts=9"], "decomp.parts = 9: grid.ny = 8 y rows cannot be split into 9"),
])
def test_too_many_parts_are_refused_by_the_loader(name, over, fragment):
    from nagare.engine.errors import PresetError
    from nagare.engine.presets import load_preset

    with pytest.raises(PresetError) as info:
        load_preset(name, over, backend="numpy")
    assert fragment in str(info.value) and f"{name}.toml" in str(info.value), str(info.value)
    fewer = [o if not o.startswith("decomp") else f"decomp.parts={int(o.split('=')[1]) - 1}" for o in over]
    assert load_preset(name, fewer, backend="numpy").decomp.parts == int(over[1].split("=")[1]) - 1


def test_gpus_too_many_names_the_option_the_preset_and_the_axis(capsys):
    from nagare.app.cli import main

    assert main(["run", "diffusion3d", "--backend", "numpy", "--quiet", "--steps", "2", "--set", "grid.nz=8",
                 "--gpus", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    # both options the check needs are named as typed (no --set decomp.parts=9 nobody typed), then the preset
    assert err[0].startswith("nagare: --set grid.nz=8 and --gpus 9 (on "), err[0]
    assert "diffusion3d.toml): grid.nz = 8 z planes cannot be split into 9 sub-domains" in err[0], err[0]
    assert "decomp.parts" not in err[0], err[0]


def test_gpus_and_a_different_decomp_parts_are_refused_in_one_line(capsys, tmp_path):
    from nagare.app.cli import main

    small = ["--backend", "numpy", "--quiet", "--steps", "2", "--set", "grid.nx=24", "--set", "grid.ny=16"]
    assert main(["run", "wave2d", *small, "--gpus", "2", "--set", "decomp.parts=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpus: got 2; --set decomp.parts=3 says otherwise" in err[0], err
    out = tmp_path / "d.npz"
    assert main(["run", "wave2d", *small, "--gpus", "2", "--set", "decomp.parts=2", "--dump", str(out)]) == 0

"""Adding a family is one folder plus one registration line: the toy family (tests/toy_family,
with a field type of its own) runs through the contract, the CLI's headless run with frames,
dumps and checkpoints, and the app's frame snapshot, and runs split into sub-domains through its
own adapter, with nothing else edited."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def toy(monkeypatch, tmp_path):
    from nagare.engine import families

    monkeypatch.setitem(families.FAMILIES, "toy1d", "tests.toy_family")  # the one-line registration
    preset = tmp_path / "toy.toml"
    preset.write_text('engine = "toy1d"\ndescription = "toy line"\n[grid]\nn = 32\n')
    return preset


def test_toy_family_runs_headless_with_its_own_field_type(toy, tmp_path):
    from nagare.app.cli import main

    frames, dump, ck = tmp_path / "frames", tmp_path / "d.npz", tmp_path / "c.npz"
    rc = main(["run", str(toy), "--steps", "20", "--frames", str(frames), "--every", "10", "--dump", str(dump),
               "--checkpoint", str(ck), "--backend", "numpy"])
    assert rc == 0
    assert len(list(frames.glob("*.png"))) >= 2
    d = np.load(dump)
    n = np.arange(32)
    u0 = np.sin(2 * np.pi * n / 32)
    assert int(d["step"]) == 20
    np.testing.assert_allclose(d["profile"], u0 * (1 - 0.25 * 2 * (1 - np.cos(2 * np.pi / 32))) ** 20,
                               rtol=1e-12, atol=1e-12)


def test_toy_family_snapshot_and_contract(toy):
    from nagare.app.gui.worker import ViewRequest, snapshot
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    eng = create_engine(load_preset(str(toy), backend="numpy"), get_backend("numpy"))
    eng.step(3)
    pk = snapshot(eng, ViewRequest(field="profile"), 1, {})
    assert pk.kind == "toy-profile"
    np.testing.assert_allclose(pk.payload, eng.u.astype(np.float32))
    b = create_engine(load_preset(str(toy), backend="numpy"), get_backend("numpy"))
    b.restore(eng.checkpoint())
    b.step(2)
    eng.step(2)
    np.testing.assert_array_equal(b.u, eng.u)


def test_the_toy_splits_into_sub_domains_with_the_mechanism_alone(toy, tmp_path, capsys):
    """The toy declares its adapter in its own folder (tests/toy_family/decomp_adapter.py) and the
    mechanism splits it: N slabs give the whole line's bits, overlap off and on, a checkpoint of
    a split run resumes unsplit, and `--gpus N` runs it — while engine/decomp imports no family."""
    from nagare.app.cli import main
    from nagare.engine import decomp
    from nagare.engine.backend import get_backend
    from nagare.engine.families import FAMILIES, create_engine, decomposable_families
    from nagare.engine.presets import load_preset

    from tests.toy_family.engine import ToyEngine

    numpy = get_backend("numpy")
    assert "toy1d" in decomposable_families()
    whole = create_engine(load_preset(str(toy), backend="numpy"), numpy)
    whole.step(7)
    for parts in (2, 3, 5):
        for overlap in ("off", "on"):
            p = load_preset(str(toy), [f"decomp.parts={parts}", f"decomp.overlap={overlap}"], backend="numpy")
            e = create_engine(p, numpy)
            assert isinstance(e, ToyEngine) and e.parts == parts and e.family == "toy1d"
            e.step(3)
            e.step(4)
            np.testing.assert_array_equal(e.state_arrays()["u"], whole.u, err_msg=f"N={parts} overlap={overlap}")
            assert len(e.timings.extra["decomp"]["rows"]) == parts
    split = create_engine(load_preset(str(toy), backend="numpy"), numpy, parts=4)
    split.step(3)
    resumed = create_engine(load_preset(str(toy), backend="numpy"), numpy)
    resumed.restore(split.checkpoint())
    resumed.step(4)
    np.testing.assert_array_equal(resumed.u, whole.u)

    dump = tmp_path / "split.npz"
    assert main(["run", str(toy), "--steps", "7", "--gpus", "3", "--dump", str(dump), "--backend", "numpy",
                 "--quiet"]) == 0, capsys.readouterr().err
    np.testing.assert_array_equal(np.load(dump)["profile"], whole.u)

    families = {m.rsplit(".", 1)[-1] for m in FAMILIES.values()}
    for path in Path(decomp.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(part in families or "toy" in part for n in names for part in n.split(".")), \
                    f"{path.name} imports a family: {ast.unparse(node)}"

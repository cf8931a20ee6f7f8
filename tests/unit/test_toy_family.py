"""Adding a family is one folder plus one registration line: the toy family (tests/toy_family,
with a field type of its own) runs through the contract, the CLI's headless run with frames,
dumps and checkpoints, and the app's frame snapshot, with nothing else edited."""
from __future__ import annotations

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

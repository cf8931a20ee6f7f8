"""`nagare bench` times whole batches; lbm2d asks for a batch that is a multiple of every ts."""
import pytest
from nagare.engine import bench
from nagare.engine.backend import get_backend


@pytest.mark.parametrize("family, case, only, expected", [
    ("lbm2d", "64x64", "reference fp16", 16),     # LBM2D.bench_batch: full ts-step launches
    ("diffusion3d", "32x32x32", "default", 10),   # no bench_batch: the generic default
])
def test_bench_uses_the_family_batch(monkeypatch, family, case, only, expected):
    seen = []

    def fake_measure(engine, warmup_steps, batch, min_time, max_steps):
        seen.append(batch)
        return {"steps": batch, "ms_per_step": 1.0, "updates_per_s": 1.0, "gbytes_per_s": 1.0,
                "roofline_pct": 0.0, "phases": {}, "extra": {}}

    monkeypatch.setattr(bench, "measure", fake_measure)
    results = bench.run_bench(family, get_backend("numpy"), cases=[case], only=[only])
    assert [r.ok for r in results] == [True]
    assert seen == [expected]
    bench.run_bench(family, get_backend("numpy"), cases=[case], only=[only], batch=3)
    assert seen[-1] == 3


def test_lbm2d_batch_is_a_multiple_of_every_ts():
    from nagare.engine.lbm2d import variants
    from nagare.engine.lbm2d.engine import LBM2D
    for ts in variants.TS_CHOICES:
        assert LBM2D.bench_batch % int(ts) == 0

"""`nagare bench` times whole batches; lbm2d asks for a batch that is a multiple of every ts."""
import pytest
from nagare.engine import bench
from nagare.engine.backend import get_backend


@pytest.mark.parametrize("family, case, only, expected", [
    ("lbm2d", "64x64", "reference fp16", 16),     # LBM2D.bench_spec().batch: full ts-step launches
    ("diffusion3d", "32x32x32", "default", 10),   # BenchSpec.batch default
])
def test_bench_uses_the_family_batch(monkeypatch, family, case, only, expected):
    seen = []

    def fake_measure(engine, warmup_steps, batch, min_time, max_steps, min_steps=0):
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
        assert LBM2D.bench_spec().batch % int(ts) == 0


class QueueingEngine:
    """An engine whose steps return at once (like queued GPU launches) and each take 10 ms of
    device time: the host clock alone would let a bench queue thousands of them."""
    DEVICE_MS = 10.0

    def __init__(self):
        self.queued = 0
        self.pending = 0

    def step(self, n):
        self.queued += n
        self.pending += n

    def batch_report(self, wait=False):
        from types import SimpleNamespace
        steps, self.pending = self.pending, 0
        return SimpleNamespace(steps=steps, ms_per_step=self.DEVICE_MS if steps else 0.0, updates_per_s=0.0,
                               gbytes_per_s=0.0, roofline_fraction=0.0, phase_ms_per_step={}, extra={})


def test_measure_is_bounded_by_device_time_not_enqueue_time():
    e = QueueingEngine()
    m = bench.measure(e, warmup_steps=5, batch=16, min_time=0.5, max_steps=20000)
    # 0.5 s at 10 ms/step: 50 steps, rounded up to whole batches of 16 → 64 timed steps
    assert m["steps"] == 64
    assert e.queued == 5 + 16 + 64
    assert m["ms_per_step"] == QueueingEngine.DEVICE_MS


class SilentEngine(QueueingEngine):
    """Queues like the GPU but reports no device time (a timer that did not record)."""

    def step(self, n):
        super().step(n)
        import time
        time.sleep(0.002 * n)  # the calibration batch's host time: 2 ms a step

    def batch_report(self, wait=False):
        rep = super().batch_report(wait)
        rep.ms_per_step = 0.0
        return rep


def test_measure_without_device_time_sizes_the_run_from_the_host_clock():
    e = SilentEngine()
    bench.measure(e, warmup_steps=5, batch=16, min_time=0.1, max_steps=20000)
    # the synchronised calibration batch took ≥ 32 ms of host time, so ≤ 4 batches are queued (not
    # the 20,000 steps a zero time per batch would ask for)
    assert 5 + 16 + 16 <= e.queued <= 5 + 16 + 4 * 16


def test_measure_queues_whole_batches_up_to_max_steps():
    e = QueueingEngine()
    m = bench.measure(e, warmup_steps=5, batch=16, min_time=100.0, max_steps=40)
    assert m["steps"] == 32  # whole batches, never past max_steps


def test_measure_runs_a_case_s_least_steps_past_min_time():
    """A case whose figures need events every so many steps (an adaptive tree's regrids) runs at least
    BenchSpec.min_steps, in whole batches, even after min_time and past max_steps."""
    e = QueueingEngine()
    m = bench.measure(e, warmup_steps=5, batch=16, min_time=0.0, max_steps=40, min_steps=100)
    assert m["steps"] == 112
    assert e.queued == 5 + 16 + 112


def test_the_vortex_case_runs_enough_steps_for_its_regrids():
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.presets import load_preset

    spec = AMR3D.bench_spec()
    every = load_preset("amr3d-vortex-adapt", backend="cupy").adapt.every
    assert spec.min_steps("vortex-adapt") >= 100 * every
    assert spec.min_steps("three-levels") == 0

"""The auto-tuner's logic on the CPU with a fake clock and a fake (lagging) timer."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from nagare.engine.autotune import Space, TuneCache, Tuner, stencil_space, tune_key
from nagare.engine.autotune.tuner import NoValidCandidate


class FakeGPU:
    """Launching a config advances a clock by cost(config); the timer reports a call's time only
    ``lag`` polls later, like CUDA events the GPU has not reached yet."""

    def __init__(self, cost, lag=0, fail=()):
        self.cost, self.lag, self.fail = cost, lag, set(fail)
        self.now = 0.0
        self.launched: list[dict] = []

    def launch(self, cfg):
        if tuple(sorted(cfg.items())) in self.fail:
            raise RuntimeError("compile failed: too many resources requested\nmore detail")
        self.launched.append(dict(cfg))
        self.now += self.cost(cfg)

    # timer protocol
    def start(self):
        return self.now

    def stop(self, token):
        return (self.now - token, len(self.launched) + self.lag)

    def poll(self, handle):
        ms, ready = handle  # known once `lag` more calls have been launched
        return ms if len(self.launched) >= ready else None

    def wait(self, handle):
        return handle[0]


def p2_cost(cfg):
    """A smooth cost with its minimum at (32, 4, 4)."""
    return (1.0 + abs(np.log2(cfg["bx"] / 32)) + 0.5 * abs(np.log2(cfg["by"] / 4))
            + 0.25 * abs(np.log2(cfg["zmarch"] / 4)))


def drive(tuner, gpu, max_calls=5000):
    for _ in range(max_calls):
        tuner(gpu.launch)
        if tuner.done:
            return
    raise AssertionError(f"tuner did not settle in {max_calls} calls: {tuner.state()}")


def test_exhaustive_finds_global_minimum_and_skips_too_many_threads():
    space = stencil_space()
    gpu = FakeGPU(p2_cost)
    t = Tuner(space, gpu, strategy="exhaustive", warmup=1, repeats=2, confirm_top=0)
    drive(t, gpu)
    assert t.best == {"bx": 32, "by": 4, "zmarch": 4}
    # 128×16 = 2048 threads is invalid, with the reason; 64×16 = 1024 is allowed.
    assert t.invalid[(128, 16, 1)] == "2048 threads per block > 1024"
    assert (64, 16, 1) in t.results
    assert all(c["bx"] * c["by"] <= 1024 for c in gpu.launched)
    # Blocks below one warp are invalid too (idle lanes), with the reason.
    assert t.invalid[(8, 2, 1)] == "16 threads per block < one warp (32): idle lanes"
    assert (4, 8, 1) in t.results
    valid = space.size - len(t.invalid)
    assert len(t.results) == valid == 210 - 7 - 42
    # one warm-up + two timed calls per candidate, then the call that settled
    assert len(t.tuning_calls) == valid * 3 and t.calls == valid * 3 + 1


def test_warmup_is_excluded_from_the_score():
    calls = {}

    def cost(cfg):  # the first call of each candidate is 100× slower (compile / cold caches)
        k = (cfg["bx"],)
        calls[k] = calls.get(k, 0) + 1
        return 100.0 * cfg["bx"] if calls[k] == 1 else float(cfg["bx"])

    space = Space({"bx": (1, 2, 3)})
    gpu = FakeGPU(cost)
    t = Tuner(space, gpu, warmup=1, repeats=3)
    drive(t, gpu)
    assert t.results == {(1,): 1.0, (2,): 2.0, (3,): 3.0}


def test_results_are_read_lazily_and_calls_never_wait():
    gpu = FakeGPU(p2_cost, lag=20)
    space = Space({"bx": (8, 16, 32, 64), "by": (1, 4), "zmarch": (4,)})
    t = Tuner(space, gpu, warmup=0, repeats=1, start={"bx": 64, "by": 1, "zmarch": 4})
    for _ in range(8):  # launches all 8 candidates although no timing has come back yet
        t(gpu.launch)
    assert t.results == {}
    st = t.state()
    assert st["status"] == "waiting" and st["remaining"] == 8 and st["measured"] == 0
    # While waiting, the calls use the start configuration (nothing measured yet), untimed.
    t(gpu.launch)
    assert gpu.launched[-1] == {"bx": 64, "by": 1, "zmarch": 4}
    drive(t, gpu)
    assert t.best == {"bx": 32, "by": 4, "zmarch": 4}
    assert t.state()["status"] == "settled"
    # After settling every call uses the best and adds no timed call.
    n = len(gpu.launched)
    for _ in range(5):
        assert t(gpu.launch) == {"bx": 32, "by": 4, "zmarch": 4}
    assert len(gpu.launched) == n + 5


def test_failed_launch_is_skipped_with_reason_and_the_call_still_runs():
    space = Space({"bx": (4, 8, 16)})
    gpu = FakeGPU(lambda c: 10.0 / c["bx"], fail={(("bx", 16),)})
    t = Tuner(space, gpu, warmup=0, repeats=1)
    launched_before = len(gpu.launched)
    cfgs = [t(gpu.launch) for _ in range(3)]
    assert len(gpu.launched) == launched_before + 3  # every call did run something
    assert {"bx": 16} not in cfgs
    assert t.invalid[(16,)] == "RuntimeError: compile failed: too many resources requested"
    drive(t, gpu)
    assert t.best == {"bx": 8}


def test_every_candidate_failing_is_an_error():
    space = Space({"bx": (4, 8)})
    gpu = FakeGPU(lambda c: 1.0, fail={(("bx", 4),), (("bx", 8),)})
    t = Tuner(space, gpu)
    with pytest.raises(NoValidCandidate, match="no candidate could run"):
        t(gpu.launch)


def test_empty_valid_space_is_an_error():
    with pytest.raises(NoValidCandidate, match="no valid candidate"):
        Tuner(stencil_space(bx=(128,), by=(16,)), FakeGPU(p2_cost))


def test_an_error_in_a_proven_configuration_propagates():
    space = Space({"bx": (4,)})
    gpu = FakeGPU(lambda c: 1.0)
    t = Tuner(space, gpu, warmup=0, repeats=1)
    drive(t, gpu)

    def broken(cfg):
        raise ValueError("out of memory")

    with pytest.raises(ValueError, match="out of memory"):
        t(broken)


@pytest.mark.parametrize("strategy", ["descent", "random"])
def test_cheap_strategies_find_the_minimum_of_a_separable_cost_with_fewer_candidates(strategy):
    space = stencil_space()
    gpu = FakeGPU(p2_cost, lag=2)
    t = Tuner(space, gpu, strategy=strategy, start={"bx": 128, "by": 1, "zmarch": 2}, seed=3)
    drive(t, gpu)
    assert t.best == {"bx": 32, "by": 4, "zmarch": 4}
    assert len(t.results) < 145 // 2


def test_descent_terminates_on_noisy_costs():
    rng = np.random.default_rng(0)
    noise = {k: rng.random() for k in stencil_space().all_keys()}
    gpu = FakeGPU(lambda c: noise[(c["bx"], c["by"], c["zmarch"])])
    t = Tuner(stencil_space(), gpu, strategy="descent", repeats=1)
    drive(t, gpu)
    best = t.results[t.settled]
    # A coordinate-wise local minimum: no single-axis move among measured points is better.
    for i, name in enumerate(t.space.names):
        for v in t.space.axes[name]:
            k = t.settled[:i] + (v,) + t.settled[i + 1:]
            if k in t.results:
                assert t.results[k] >= best


def test_auto_strategy_picks_by_space_size():
    small = Space({"a": tuple(range(8)), "b": tuple(range(8))})  # 64 points: measure them all
    assert Tuner(small, FakeGPU(lambda c: 1.0)).strategy == "exhaustive"
    assert Tuner(stencil_space(), FakeGPU(p2_cost)).strategy == "descent"  # hundreds of valid points
    big = Space({"a": tuple(range(20)), "b": tuple(range(20))})
    assert Tuner(big, FakeGPU(lambda c: 1.0)).strategy == "descent"


def test_overhead_counts_the_extra_time_of_tuning_calls():
    space = Space({"bx": (1, 2, 4)})
    gpu = FakeGPU(lambda c: float(c["bx"]))
    t = Tuner(space, gpu, warmup=1, repeats=1, confirm_top=0)
    drive(t, gpu)
    # calls used 1,1,2,2,4,4 ms; best 1 ms → overhead (0+0+1+1+3+3) = 8 calls
    assert t.overhead_calls() == pytest.approx(8.0)


def test_cache_round_trip_starts_tuned(tmp_path):
    cache = TuneCache(tmp_path / "autotune.json")
    key = tune_key("H200", "diffusion7", (64, 64, 64), np.float32, {"boundary": "periodic"})
    gpu = FakeGPU(p2_cost)
    t = Tuner(stencil_space(), gpu, key=key, cache=cache)
    drive(t, gpu)
    entry = cache.get(key)
    assert entry["config"] == {"bx": 32, "by": 4, "zmarch": 4}
    gpu2 = FakeGPU(p2_cost)
    t2 = Tuner(stencil_space(), gpu2, key=key, cache=cache)
    assert t2.state()["status"] == "cached"
    assert t2(gpu2.launch) == {"bx": 32, "by": 4, "zmarch": 4}
    assert len(gpu2.launched) == 1
    # Another shape is another key: not tuned yet.
    t3 = Tuner(stencil_space(), gpu2, key=key.replace("64x64x64", "32x32x32"), cache=cache)
    assert not t3.done


def test_cached_config_outside_space_or_failing_is_retuned(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.put("k", {"bx": 999, "by": 1, "zmarch": 1}, 1.0)
    assert not Tuner(stencil_space(), FakeGPU(p2_cost), key="k", cache=cache).done
    cache.put("k", {"bx": 32, "by": 4, "zmarch": 4}, 1.0)
    gpu = FakeGPU(p2_cost, fail={(("bx", 32), ("by", 4), ("zmarch", 4))})
    t = Tuner(stencil_space(), gpu, key="k", cache=cache)
    assert t.done
    t(gpu.launch)  # the cached pick fails: dropped, tuning restarts, the call still runs
    assert not t.done and cache.get("k") is None
    drive(t, gpu)
    assert t.best != {"bx": 32, "by": 4, "zmarch": 4}
    assert cache.get("k")["config"] == t.best


def test_cache_file_is_json_and_survives_garbage_and_concurrent_writers(tmp_path):
    path = tmp_path / "autotune.json"
    path.write_text("{not json")
    cache = TuneCache(path)
    assert cache.load() == {}

    def writer(i):
        TuneCache(path).put(f"key{i}", {"bx": i}, float(i))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    data = json.loads(path.read_text())  # never torn
    assert data["format"] == 1 and len(data["entries"]) >= 1
    assert not list(tmp_path.glob("*.tmp"))
    assert cache.remove("key") == len(data["entries"])
    assert cache.load() == {}


def test_state_reports_progress():
    space = Space({"bx": (1, 2, 3, 4)})
    gpu = FakeGPU(lambda c: float(c["bx"]))
    t = Tuner(space, gpu, warmup=0, repeats=1, label="demo")
    st = t.state()
    assert st["status"] == "tuning" and st["best"] is None and st["space"] == 4
    t(gpu.launch)
    t(gpu.launch)
    t.poll()
    st = t.state()
    assert st["current"] == {"bx": 2} and st["measured"] == 2 and st["remaining"] == 2
    assert st["best"] == {"bx": 1} and st["best_ms"] == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown tuning strategy"):
        Tuner(Space({"a": (1,)}), FakeGPU(p2_cost), strategy="annealing")
    # A start outside the space (a custom space without the default launch) falls back to the
    # space's first valid point instead of failing.
    space = Space({"a": (1, 3)})
    assert Tuner(space, FakeGPU(p2_cost), start={"a": 2}).start == space.key({"a": 1})


def test_generic_space_with_shared_memory_constraint():
    from nagare.engine.autotune import max_shared_bytes, product_space

    space = product_space({"tile": (16, 32, 64), "ts": (1, 2)},
                          max_shared_bytes(lambda c: c["tile"] ** 2 * 4 * c["ts"], 16384))
    gpu = FakeGPU(lambda c: 1.0 / c["tile"] + 0.1 * c["ts"])
    t = Tuner(space, gpu, repeats=1)
    assert (64, 1) not in t.invalid  # exactly at the limit fits
    assert t.invalid[(64, 2)] == "needs 32768 B of shared memory > 16384 B per block"
    drive(t, gpu)
    assert t.best == {"tile": 64, "ts": 1}


def test_a_returned_launch_thunk_is_all_that_is_timed():
    space = Space({"bx": (1, 2)})
    gpu = FakeGPU(lambda c: float(c["bx"]))

    def prepare(cfg):
        gpu.now += 100.0  # host-side preparation: must not be in the timing
        return lambda: gpu.launch(cfg)

    t = Tuner(space, gpu, warmup=0, repeats=1)
    for _ in range(4):
        t(prepare)
    assert t.results == {(1,): 1.0, (2,): 2.0}


def test_confirmation_round_overrules_one_lucky_sample():
    calls = {}

    def cost(cfg):  # bx=2's first timed call is a lucky outlier; really bx=1 is fastest
        calls[cfg["bx"]] = calls.get(cfg["bx"], 0) + 1
        if cfg["bx"] == 2:
            return 0.5 if calls[2] == 1 else 3.0
        return float(cfg["bx"])

    gpu = FakeGPU(cost)
    t = Tuner(Space({"bx": (1, 2, 3)}), gpu, warmup=0, repeats=1, confirm_top=2, confirm_repeats=3)
    drive(t, gpu)
    assert t.best == {"bx": 1}
    assert t.results[(2,)] == 3.0  # median of 0.5, 3, 3, 3
    assert calls == {1: 5, 2: 4, 3: 1}  # 1 + 3 confirmation calls each, + the call that settled
    no_confirm = Tuner(Space({"bx": (1, 2, 3)}), FakeGPU(cost), warmup=0, repeats=1, confirm_top=0)
    calls.clear()
    drive(no_confirm, no_confirm.timer)
    assert no_confirm.best == {"bx": 2}  # what a single sample would have picked


class LaunchBoundGPU(FakeGPU):
    """A model of a launch-bound kernel: each launch costs ``cost(cfg)`` on the GPU, but unless a
    hold has been queued in front of the measurement, the GPU also idles for the host's gap before
    each launch (random, several times the kernel). A hold makes the batch run back to back."""

    def __init__(self, cost, seed=0):
        super().__init__(cost)
        self.rng = np.random.default_rng(seed)
        self.held = False
        self.holds: list[float] = []

    def hold(self, ms):
        self.holds.append(ms)
        self.held = True

    def launch(self, cfg):
        self.launched.append(dict(cfg))
        self.now += self.cost(cfg) + (0.0 if self.held else self.rng.uniform(0.005, 0.03))

    def stop(self, token):
        self.held = False
        return super().stop(token)


def small_cost(cfg):
    return 0.001 * p2_cost(cfg)  # 1–6 µs: far below the host's time per call


def test_launch_bound_single_call_timings_pick_noise_but_held_batches_pick_the_minimum():
    space = stencil_space()
    noisy = LaunchBoundGPU(small_cost)
    # Both search the whole space (auto would be descent here): the subject is how a candidate is timed.
    t1 = Tuner(space, noisy, batch=1, hold=False, repeats=3, strategy="exhaustive")
    drive(t1, noisy, max_calls=20000)
    best = small_cost({"bx": 32, "by": 4, "zmarch": 4})
    assert small_cost(t1.best) > 1.03 * best  # the failure the issue saw at 32³/64³
    gpu = LaunchBoundGPU(small_cost)
    t = Tuner(space, gpu, batch="auto", repeats=3, prune=1.5, strategy="exhaustive")
    drive(t, gpu, max_calls=200000)
    assert t.best == {"bx": 32, "by": 4, "zmarch": 4}
    assert t.batch > 1 and gpu.holds  # measurements were batches of calls behind holds
    assert t.hold_ms_total == pytest.approx(sum(gpu.holds))
    # Per-call scores are the kernels' own times, not the host's gaps.
    assert t.results[t.settled] == pytest.approx(best)


def test_auto_batch_is_sized_by_a_probe_of_the_start_configuration():
    gpu = FakeGPU(lambda c: 0.01 * c["bx"])  # start (2,) takes 0.02 ms → 10 calls per measurement at 0.2 ms
    t = Tuner(Space({"bx": (1, 2, 4)}), gpu, batch="auto", warmup=0, repeats=1, confirm_top=0, start={"bx": 2})
    assert t.state()["phase"] == "probe"
    drive(t, gpu)
    assert t.batch == 10
    assert t.results == {(1,): pytest.approx(0.01), (2,): pytest.approx(0.02), (4,): pytest.approx(0.04)}
    # probe (2 single calls of the start) + 10 calls per candidate, then the call that settled
    assert [c["bx"] for c in gpu.launched[:2]] == [2, 2]
    assert len(t.tuning_calls) == 2 + 3 * 10 and t.calls == 2 + 30 + 1


def test_prune_measures_far_off_candidates_once():
    gpu = FakeGPU(lambda c: {1: 1.0, 2: 1.2, 3: 10.0, 4: 20.0}[c["bx"]])
    t = Tuner(Space({"bx": (1, 2, 3, 4)}), gpu, warmup=0, repeats=3, prune=1.5, confirm_top=0)
    drive(t, gpu)
    assert t.best == {"bx": 1}
    assert {k[0]: len(v) for k, v in t._samples.items()} == {1: 3, 2: 3, 3: 1, 4: 1}
    no_prune = FakeGPU(gpu.cost)
    t2 = Tuner(Space({"bx": (1, 2, 3, 4)}), no_prune, warmup=0, repeats=3, confirm_top=0)
    drive(t2, no_prune)
    assert all(len(v) == 3 for v in t2._samples.values())


def test_warm_up_once_per_warm_key():
    gpu = FakeGPU(lambda c: float(c["bx"]))
    space = Space({"bx": (1, 2, 3, 4)})
    t = Tuner(space, gpu, warmup=1, repeats=1, confirm_top=0, warm_key=lambda c: c["bx"] % 2)
    drive(t, gpu)
    assert len(t.tuning_calls) == 4 + 2  # one warm-up for the odd and one for the even kernel
    t2 = Tuner(space, FakeGPU(gpu.cost), warmup=1, repeats=1, confirm_top=0)
    drive(t2, t2.timer)
    assert len(t2.tuning_calls) == 4 + 4


def test_waiting_calls_are_bounded_when_the_gpu_lags():
    gpu = FakeGPU(p2_cost, lag=10 ** 9)  # timings never come back on their own: the tuner must wait
    space = Space({"bx": (8, 16, 32, 64), "by": (1, 4), "zmarch": (4,)})
    t = Tuner(space, gpu, warmup=0, repeats=2, max_waiting_calls=3, start={"bx": 64, "by": 1, "zmarch": 4})
    drive(t, gpu, max_calls=200)
    assert t.best == {"bx": 32, "by": 4, "zmarch": 4}
    measured = 8 * 2 + 3 * 4  # screen + refine, run-off of 3 × 4 rounds
    # at most 3 untimed calls while waiting, at each of the three phases (screen, refine, run-off)
    assert measured <= len(t.tuning_calls) <= measured + 3 * 3


def test_run_off_is_interleaved_round_robin():
    gpu = FakeGPU(lambda c: float(c["bx"]))
    t = Tuner(Space({"bx": (1, 2, 3, 4, 5)}), gpu, warmup=0, repeats=1, confirm_top=3, confirm_repeats=3)
    drive(t, gpu)
    runoff = [c["bx"] for c in gpu.launched[5:5 + 9]]
    assert runoff == [1, 2, 3, 2, 3, 1, 3, 1, 2]
    assert t.best == {"bx": 1}


def test_overhead_includes_holds():
    gpu = LaunchBoundGPU(lambda c: 0.001 * c["bx"])
    t = Tuner(Space({"bx": (1, 2)}), gpu, batch=4, warmup=0, repeats=1, confirm_top=0)
    drive(t, gpu)
    assert gpu.holds and t.overhead_ms() == pytest.approx(sum(gpu.holds) + 4 * 0.001)
    assert t.overhead_calls() == pytest.approx(t.overhead_ms() / 0.001)


def test_held_measurements_in_flight_are_bounded():
    """With holds the GPU falls a little behind per measurement; the tuner waits for the oldest
    rather than let the backlog (and with it the host time the holds are sized from) grow."""
    gpu = LaunchBoundGPU(small_cost)
    gpu.lag = 10 ** 9  # timings come back only when waited for
    t = Tuner(Space({"bx": (8, 16, 32, 64), "by": (4,), "zmarch": (4,)}), gpu, batch=8, repeats=2,
              max_held_pending=2)
    seen = 0
    for _ in range(2000):
        t(gpu.launch)
        seen = max(seen, len(t._pending))
        if t.done:
            break
    assert t.done and t.best == {"bx": 32, "by": 4, "zmarch": 4}
    assert gpu.holds and seen <= 2


class IdleStartGPU(FakeGPU):
    """A blocking measurement leaves the GPU idle: the start event then fires at once and the first
    launch of the next batch only runs after the host's launch latency — unless a hold was queued."""

    LATENCY = 0.006  # ms from the host's call to the kernel's start on an idle GPU

    def __init__(self, cost):
        super().__init__(cost)
        self.idle, self.held, self.holds = True, False, []

    def hold(self, ms):
        self.holds.append(ms)
        self.held = True

    def launch(self, cfg):
        if self.idle and not self.held:
            self.now += self.LATENCY
        self.idle = False
        self.now += self.cost(cfg)

    def wait(self, handle):
        self.idle, self.held = True, False
        return super().wait(handle)


def test_blocking_measurements_of_long_kernels_time_the_kernel_not_the_launch_latency():
    from nagare.engine.autotune import measure

    gpu = IdleStartGPU(lambda cfg: 0.28)  # a 512³ diffusion sweep: far longer than the host's call
    cfg = {"bx": 32}
    ms = measure.time_batches(lambda: gpu.launch(cfg), gpu, batch=1, batches=3, ref_ms=0.28, host_ms=0.01)
    assert ms == pytest.approx([0.28] * 3)  # without the hold: 0.286 each, 2 % slow
    assert len(gpu.holds) == 3 and all(h == pytest.approx(measure.hold_ms(1, 0.01)) for h in gpu.holds)
    unheld = IdleStartGPU(lambda cfg: 0.28)
    unheld.hold = None  # a timer that cannot hold: the latency is what such a measurement sees
    ms = measure.time_batches(lambda: unheld.launch(cfg), unheld, batch=1, batches=2, ref_ms=0.28, host_ms=0.01)
    assert ms == pytest.approx([0.28 + IdleStartGPU.LATENCY] * 2)

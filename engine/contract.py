"""The engine contract every solver family implements (docs/architecture.md, "The engine contract").

A family subclasses :class:`Engine` (an abstract base class: a concrete family that leaves one of
the abstract methods below unimplemented is refused when its class is defined) and provides:

- ``family`` (its registry name) and ``Preset`` (its pydantic preset model),
- ``_allocate()`` / ``_initialise()``: state on ``self.xp`` from ``self.preset``,
- ``_advance(n) -> float``: advance n steps on ``self.stream`` using ``self.timer.phase(...)``
  around device work, return the physical time advanced,
- ``state_arrays()`` / ``_load_state_arrays(d)``: the complete state (checkpoint/restore),
- ``fields()``: every named field; ``device_diagnostics()``: cheap scalars as device values,
- ``updates_per_step``, ``bytes_per_update()``: the throughput and roofline model,
- ``random_state(rng)``: a fresh random *physically valid* state (equivalence tests),
- class method ``equivalence_presets()``: small presets for the registry test.

and may override (each has a default):

- ``_apply_selection(old, new)``: rebuild kernels / convert layouts for a new variant selection
  while keeping the physical state,
- ``field_names()`` / ``field(name)``: one field without computing all of them,
- ``check_restorable(arrays)``: whether a checkpoint's arrays fit this engine (default: the same
  names, shapes and dtypes; an octree whose leaf count changes overrides it),
- ``check_consistent(meta, arrays)``: whether they agree with the meta (default: no unknown arrays,
  time = step × Δt for constant-Δt families; amr3d adds its tracers' clock and positions),
- ``estimated_bytes()``, ``timing_extra()``, ``equivalence_companions()``,
- class method ``bench_spec()``: what ``nagare bench`` measures (engine/benchspec.py),
- ``kernel_specs(selection)``: the CUDA modules a selection compiles (warm-up, engine/cuda.py).

Users (worker, CLI, bench, tests) call only the public names: ``step``, ``synchronize``,
``on_stream``, ``fields``/``field_names``/``field``, ``diagnostics``/``device_diagnostics``/
``check_finite``, ``variants``/``set_variant``/``selection``, ``timings``/``batch_report``,
``checkpoint``/``restore``, ``step_count``, ``time``, ``bench_spec``.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from contextlib import nullcontext
from typing import Any, ClassVar

import numpy as np

from . import progress, registry
from .backend import Backend
from .benchspec import BenchSpec
from .checkpoint import CHECKPOINT_FORMAT
from .device import copy_bandwidth
from .errors import CheckpointError, Diverged, NagareError, VariantUnavailable
from .pending_checkpoint import begin_checkpoint
from .presets import PresetBase, raw_dict
from .timing import PhaseTimer, TimingReport, TimingWindow, summarise


def bound_text(name: str, lo: float, hi: float) -> str:
    """A sanity bound as a plain statement: "max_speed < 0.577", "min_density > 0",
    "-2 < max < 2"; a side that is infinite is left out."""
    if math.isinf(lo) and math.isinf(hi):
        return f"{name} finite"
    if math.isinf(lo):
        return f"{name} < {hi:.3g}"
    if math.isinf(hi):
        return f"{name} > {lo:.3g}"
    return f"{lo:.3g} < {name} < {hi:.3g}"


class OutOfMemory(NagareError):
    """The preset does not fit in the backend's memory."""


def available_memory(backend: Backend) -> int | None:
    """Free device memory (CuPy) or available host memory (NumPy), in bytes; None if unknown."""
    try:
        if backend.is_gpu:
            free, _total = backend.xp.cuda.runtime.memGetInfo()
            return int(free + backend.xp.get_default_memory_pool().free_bytes())
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except Exception:
        return None
    return None


class Engine(ABC):
    family: ClassVar[str] = ""
    Preset: ClassVar[type[PresetBase]] = PresetBase
    # True when every step advances physical time by the same self.dt: then time = step_count·dt,
    # which does not depend on how steps were grouped into batches (bit-for-bit resume).
    constant_dt: ClassVar[bool] = False
    # what self.time is in (the app's HUD and status line show it): "s", "lattice steps", ... ;
    # "" for a family whose time carries the preset's own units (κ and Δx as the user gave them)
    time_units: ClassVar[str] = ""
    # what __init__ is doing, as the app shows it while a preset is built (engine/progress.py):
    # while _allocate, _initialise and _apply_selection run
    build_stages: ClassVar[tuple[str, str, str]] = ("allocating the state", "setting the initial state",
                                                    "loading the kernels")
    equivalence_steps: ClassVar[int] = 64

    def __init_subclass__(cls, **kwargs):
        """A concrete family (one that names its ``family``) must implement every abstract method:
        refuse it here, where the class is defined, rather than at its first use."""
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("family"):
            return
        missing = sorted(name for name in Engine.__abstractmethods__
                         if getattr(getattr(cls, name, None), "__isabstractmethod__", False))
        if missing:
            raise TypeError(f"engine family '{cls.family}' ({cls.__qualname__}) does not implement "
                            f"{', '.join(missing)} (engine/contract.py)")

    def __init__(self, preset: PresetBase, backend: Backend, variants: dict | None = None):
        self.preset = preset
        self.backend = backend
        self.xp = backend.xp
        self.stream = backend.new_stream()
        self.timer = PhaseTimer(backend, self.stream)
        self.window = TimingWindow()
        self._batch: deque = deque(maxlen=100_000)  # samples since the last batch_report()
        self.step_count = 0
        self._time = 0.0
        self._roofline: float | None = None
        self.selection = registry.resolve_selection(self.family, backend.name, preset, preset.variants, variants)
        self._check_memory()
        try:
            with self.on_stream():
                progress.report(self.build_stages[0], 0.0)
                self._allocate()
                progress.report(self.build_stages[1], 1 / 3)
                self._initialise()
                progress.report(self.build_stages[2], 2 / 3)
                self._apply_selection({}, dict(self.selection))
                progress.report("ready", 1.0)
        except MemoryError as exc:  # NumPy's and CuPy's out-of-memory errors both derive from it
            raise OutOfMemory(f"{preset.source}: not enough {backend.name} memory for this preset "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                              f"reduce the problem size") from None

    def _check_memory(self) -> None:
        need = self.estimated_bytes()
        if not need:
            return
        free = available_memory(self.backend)
        if free is not None and need > free:
            raise OutOfMemory(f"{self.preset.source}: this preset needs about {need / 2**30:.1f} GiB of "
                              f"{'GPU' if self.backend.is_gpu else 'host'} memory, {free / 2**30:.1f} GiB are free; "
                              f"reduce the problem size")

    def estimated_bytes(self) -> int:
        """Memory the engine will allocate for this preset (0 = unknown; checked before allocating)."""
        return 0

    # ---- what families implement ---------------------------------------------------------
    @abstractmethod
    def _allocate(self) -> None:
        """Allocate the state on ``self.xp`` for ``self.preset`` (no values yet)."""

    @abstractmethod
    def _initialise(self) -> None:
        """Set the initial state the preset describes."""

    @abstractmethod
    def _advance(self, n: int) -> float:
        """Advance n steps on ``self.stream`` (device work inside ``self.timer.phase``); return the
        physical time advanced."""

    def _apply_selection(self, old: dict, new: dict) -> None:  # noqa: B027 (optional hook: default does nothing)
        """Called at construction (old = {}) and on every set_variant(). Default: nothing to rebuild."""

    @abstractmethod
    def state_arrays(self) -> dict[str, Any]:
        """Every array that influences the future, by name (what a checkpoint holds). Must not wait
        for the device (no host reads of device values): the app snapshots it on the stream while
        the simulation runs on (engine/pending_checkpoint.py; a decomposed run, which gathers its
        parts first, is the one exception). May return the live arrays: callers copy."""

    @abstractmethod
    def _load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Load host arrays of :meth:`state_arrays` (already checked by :meth:`check_restorable`)."""

    @abstractmethod
    def fields(self) -> dict[str, Any]:
        """Every named field (engine/fields.py types) for rendering and export, in display order."""

    def field_names(self) -> list[str]:
        """The names :meth:`fields` returns, in its order (the first is the default view).

        Override together with :meth:`field` when computing every field is costly: the app asks
        for the one field on screen about 30 times a second; exports still call :meth:`fields`."""
        return list(self.fields())

    def field(self, name: str):
        """One field by name (KeyError if the engine has no such field)."""
        return self.fields()[name]

    @abstractmethod
    def device_diagnostics(self) -> dict[str, float]:
        """Cheap scalars (mass, max |u| ...) as device values, launched on the stream without a host
        sync; :meth:`diagnostics` reads them and checks they are finite."""

    @abstractmethod
    def random_state(self, rng: np.random.Generator) -> None:
        """Replace the state by a random *physically valid* one (equivalence tests)."""

    @property
    @abstractmethod
    def updates_per_step(self) -> float:
        """Lattice/point/particle updates per step (for MLUPS-style throughput)."""

    @abstractmethod
    def bytes_per_update(self) -> float:
        """Device-memory bytes one update must move at least (the engine's roofline model)."""

    @classmethod
    @abstractmethod
    def equivalence_presets(cls) -> dict[str, PresetBase]:
        """{label: small preset} on which the registry test checks every variant."""

    @classmethod
    def equivalence_companions(cls, axis: str, choice: str) -> dict:
        """Other axes a choice needs to mean something in the registry test (e.g. a tile size
        only matters under a temporal-blocking kernel). Default: none."""
        return {}

    @classmethod
    def bench_spec(cls) -> BenchSpec:
        """What ``nagare bench FAMILY`` measures (engine/benchspec.py); default: no benchmark."""
        return BenchSpec()

    @classmethod
    def bench_report(cls, results: list) -> str:
        """Markdown that ``nagare bench`` writes below its table: the family's paper table computed
        from the measured cells (``results``: engine/bench.BenchResult, in order). Default: none."""
        return ""

    def kernel_specs(self, selection: dict | None = None) -> list:
        """The CUDA modules (engine/cuda.py ``KernelSpec``) ``selection`` (default: the current
        one) compiles on this engine, for a warm-up: ``cuda.precompile(engine.kernel_specs(sel),
        jobs)`` ahead of a switch. Default: none."""
        return []

    def sanity_bounds(self) -> dict[str, tuple[float, float]]:
        """Physical bounds on the diagnostics, {name: (low, high)} (open interval): a state whose
        diagnostic leaves them is treated as diverged, so the last checkpoint that passed is
        physical, not only finite (a blowing-up run is finite for many steps before it is NaN).
        Default: none. Families declare cheap ones (LBM: density > 0, speed below the lattice
        sound speed; SPH: density > 0, particles in the tank, speed below a multiple of c0)."""
        return {}

    def check_restorable(self, arrays: dict[str, np.ndarray]) -> None:
        """CheckpointError unless ``arrays`` (a checkpoint's state) can be loaded into this engine.

        Default: every array of :meth:`state_arrays` present with the same dtype and shape. A family
        whose state changes shape as it runs (an octree's leaf count) overrides this and resizes in
        :meth:`_load_state_arrays`."""
        self._check_arrays(arrays, {k: (v.shape, v.dtype) for k, v in self.state_arrays().items()})

    @staticmethod
    def _check_arrays(arrays: dict, expected: dict) -> None:
        """CheckpointError unless every name of ``expected`` ({name: (shape, dtype)}) is in
        ``arrays`` with that shape and dtype."""
        for k, (shape, dtype) in expected.items():
            if k not in arrays:
                raise CheckpointError(f"checkpoint lacks state array '{k}'")
            if np.dtype(arrays[k].dtype) != np.dtype(dtype):
                raise CheckpointError(f"checkpoint array '{k}' is {np.dtype(arrays[k].dtype)}, the running engine "
                                      f"{np.dtype(dtype)}: load it with its own preset (precision)")
            if tuple(arrays[k].shape) != tuple(shape):
                raise CheckpointError(f"checkpoint array '{k}' has shape {arrays[k].shape}, "
                                      f"the running engine {tuple(shape)}: load it with its own preset")

    # ---- provided -----------------------------------------------------------------------
    def on_stream(self):
        return self.stream if self.stream is not None else nullcontext()

    @property
    def time(self) -> float:
        if self.constant_dt:
            return self.step_count * self.dt
        return self._time

    def device_time(self):
        """The simulated time without a host sync: a float, or a device scalar (a copy, valid once
        the stream reaches this point) for families that keep the time on the device (SPH's
        adaptive Δt). The app stamps every published frame with it."""
        return self.time

    def step(self, n: int = 1) -> None:
        """Advance n steps. Never waits for the device."""
        if n < 1:
            return
        # A state that blows up overflows on NumPy: the diagnostics report it in one line (Diverged),
        # so the floating-point warnings on the way are not printed.
        with self.on_stream(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            self._time += self._advance(n)
        self.step_count += n
        self._absorb(self.timer.collect())

    def synchronize(self) -> None:
        self.backend.synchronize(self.stream)

    def diagnostics(self) -> dict[str, float]:
        with self.on_stream(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            d = {k: float(v) for k, v in self.device_diagnostics().items()}
        return self.check_finite(d, self.step_count)

    def check_finite(self, d: dict[str, float], step: int) -> dict[str, float]:
        """``d`` (host floats of :meth:`device_diagnostics` taken at ``step``), or Diverged if any is NaN/Inf.

        Split from :meth:`diagnostics` for owners that launch ``device_diagnostics()`` on the stream and
        read the values later, once an event says they are done (no host sync per frame)."""
        bad = [k for k, v in d.items() if not math.isfinite(v)]
        if bad:
            raise Diverged(self.family, step,
                           f"{', '.join(bad)} is not finite (NaN/Inf); {self.divergence_advice()}")
        for k, (lo, hi) in self.sanity_bounds().items():
            if k in d and not lo < d[k] < hi:
                raise Diverged(self.family, step,
                               f"{k} = {d[k]:.4g} is outside its physical range ({bound_text(k, lo, hi)}); "
                               f"{self.divergence_advice()}")
        return d

    def divergence_advice(self) -> str:
        """What to change when a run diverges, in the family's own knobs (the Diverged line ends
        with it). Default: for the explicit schemes, whose time step bounds their stability."""
        return "lower the time step or the velocity, or raise the resolution/viscosity"

    # variants ------------------------------------------------------------------------------
    @property
    def variants(self) -> dict[str, dict]:
        """{axis: {"current": choice, "live": bool, "doc": str, "choices": {name: reason|None},
        "docs": {name: the choice's doc}, "companions": {name: {axis: choice}}}} — a choice that
        cannot run with the current selection but can with its :meth:`equivalence_companions`
        (e.g. compact's batching = grouped with y-direction = transpose) is offered (reason None)
        with them: switch them together."""
        fam = registry.axes(self.family)
        out = {}
        for name, ax in fam.items():
            choices, companions = {}, {}
            for cname, ch in ax.choices.items():
                trial = dict(self.selection, **{name: cname})
                reason = registry.unavailable_reason(ch, self.backend.name, trial, self.preset)
                if reason is not None:
                    comp = {a: c for a, c in type(self).equivalence_companions(name, cname).items()
                            if a in fam and a != name and self.selection.get(a) != c}
                    trial = dict(trial, **comp)
                    if comp and all(registry.unavailable_reason(fam[a].choices[trial[a]], self.backend.name, trial,
                                                                self.preset) is None for a in (name, *comp)):
                        reason, companions[cname] = None, comp
                choices[cname] = reason
            out[name] = {"current": self.selection[name], "live": ax.live, "doc": ax.doc, "choices": choices,
                         "docs": {cname: ch.doc for cname, ch in ax.choices.items()}, "companions": companions}
        return out

    def set_variant(self, **changes) -> None:
        """Switch optimisation choices between steps; the physical state is kept."""
        fam = registry.axes(self.family)
        new = dict(self.selection)
        for axis, value in changes.items():
            if axis not in fam:
                raise VariantUnavailable(f"unknown variant axis '{axis}' for {self.family}; "
                                         f"allowed: {', '.join(fam)}")
            new[axis] = registry.parse_choice(fam[axis], value, self.backend.name)
        for axis in changes:
            choice = fam[axis].choices[new[axis]]
            reason = registry.unavailable_reason(choice, self.backend.name, new, self.preset)
            if reason:
                raise VariantUnavailable(registry.refusal(choice, self.backend.name, new, self.preset, reason))
        if new == self.selection:
            return
        # Samples of the old variant go to the window and the pending batch first; an owner that
        # logs rows per variant calls batch_report() before set_variant().
        self._absorb(self.timer.collect(wait=True))
        old, self.selection = self.selection, new
        try:
            with self.on_stream():
                self._apply_selection(old, new)
        except Exception:
            self.selection = old
            with self.on_stream():
                self._apply_selection(new, old)
            raise
        self.window.clear()  # the live figures of one variant must not blend into another's

    # timings -------------------------------------------------------------------------------
    def roofline_bytes_per_s(self) -> float:
        if self._roofline is None:
            self._roofline = copy_bandwidth(self.backend)
        return self._roofline

    def _absorb(self, samples) -> None:
        self.window.add(samples)
        self._batch.extend(samples)

    def _summary(self, samples) -> TimingReport:
        rep = summarise(samples, self.updates_per_step, self.bytes_per_update(), self.roofline_bytes_per_s())
        rep.extra.update(self.timing_extra())
        return rep

    def timing_extra(self) -> dict:
        """Engine-specific figures for the HUD and logs (auto-tuner state, list lengths, ...)."""
        return {}

    def fixed_layout_reason(self) -> str | None:
        """Why the layout of this run's fields may change while it runs (an adaptive tree's leaves),
        or None when it stays as built: outputs that need one layout for every step (a VTKHDF time
        series) are refused up front with this reason."""
        return None

    def tracer_capacity(self) -> int | None:
        """Tracers kept per seed when the engine's count is adjustable while running (the app's
        "tracers per seed" control); None: no such tracers (the default)."""
        return None

    def set_tracer_count(self, count: int) -> None:
        """Keep ``count`` tracers per seed from now on (engines whose tracer_capacity() is not None)."""
        raise ValueError(f"{self.family}: no tracers whose count can change while running")

    def logged_quantities(self) -> dict[str, float]:
        """Physical quantities of the current state written into every row of the timing log and
        shown in the HUD (a body's drag and lift coefficients, ...): host floats, asked once per
        batch, so they may synchronise. Empty by default."""
        return {}

    def device_quantities(self):
        """:meth:`logged_quantities` in two halves, for a caller that must not wait for the device
        (the app's worker): ``(values, finish)``, where ``values`` are device arrays launched on the
        stream now (no host sync) and ``finish(host)`` turns their host copies (same keys, NumPy
        arrays) into logged_quantities()' dict, the same floats. None (the default): only
        logged_quantities() gives them (a GPU caller then waits for the stream)."""
        return None

    @property
    def timings(self) -> TimingReport:
        """Sliding-window summary of what the device has finished so far (never waits)."""
        self._absorb(self.timer.collect())
        return self._summary(self.window.samples)

    def batch_report(self, wait: bool = False) -> TimingReport:
        """Summary of the samples resolved since the previous call (one timing-log row).

        With wait=True the host waits for the device once (end of a run), never per step.
        """
        self._absorb(self.timer.collect(wait=wait))
        rep = self._summary(self._batch)
        self._batch.clear()
        return rep

    # checkpoints ---------------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        """The full state as host arrays plus metadata; independent of the backend."""
        with self.on_stream():
            # Copies: a checkpoint must not change when the engine steps on (NumPy arrays are live).
            arrays = {k: np.array(self.backend.asnumpy(v), copy=True) for k, v in self.state_arrays().items()}
        return {"meta": self.checkpoint_meta(), "arrays": arrays}

    def checkpoint_meta(self, time: float | None = None) -> dict[str, Any]:
        """A checkpoint's metadata at the current step; ``time`` None reads :attr:`time` (which may
        wait for the device where the clock lives there: SPH's adaptive Δt)."""
        return {
            "format": CHECKPOINT_FORMAT, "family": self.family, "step": self.step_count,
            "time": self.time if time is None else time,
            "variants": self.selection, "preset": raw_dict(self.preset), "preset_hash": self.preset.content_hash,
            "preset_source": self.preset.source,
        }

    def begin_checkpoint(self):
        """:meth:`checkpoint` without waiting for the device: a PendingCheckpoint whose ``done``
        says when its copies (on a side stream) have finished and whose ``result()`` is the
        checkpoint (engine/pending_checkpoint.py). NumPy: complete at once."""
        return begin_checkpoint(self)

    def check_consistent(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """CheckpointError unless a checkpoint's arrays agree with its meta and with each other
        beyond names, shapes and dtypes (:meth:`check_restorable`): no state array this engine does
        not have (refused, named: a file of another version or preset must not be half-loaded),
        and, where every step advances the same Δt, ``meta.time`` = ``meta.step`` × Δt. Families
        extend it with their own clocks and counters (amr3d: the tracers')."""
        names = set(self.state_arrays())
        extra = sorted(k for k in arrays if k not in names)
        if extra:
            listed = ", ".join(repr(k) for k in extra)
            raise CheckpointError(f"checkpoint holds state array{'s' if len(extra) > 1 else ''} {listed} that "
                                  f"this {self.family} engine does not have (another version or preset?): refused "
                                  f"rather than ignored; expected only {', '.join(repr(k) for k in sorted(names))}")
        if self.constant_dt:
            step, t = int(meta["step"]), float(meta["time"])
            want = step * self.dt
            if not math.isclose(t, want, rel_tol=1e-9, abs_tol=1e-12 * abs(self.dt)):
                raise CheckpointError(f"meta.time = {t:.6g} does not match meta.step × Δt = {step} × {self.dt:.6g} = "
                                      f"{want:.6g} (every {self.family} step advances the same Δt): not a state "
                                      "to resume from")

    def restore(self, ckpt: dict[str, Any]) -> None:
        meta, arrays = ckpt["meta"], ckpt["arrays"]
        if meta.get("family") != self.family:
            raise CheckpointError(f"checkpoint is for engine '{meta.get('family')}', not '{self.family}'")
        self.check_restorable(arrays)
        self.check_consistent(meta, arrays)
        names = list(self.state_arrays())
        with self.on_stream():
            self._load_state_arrays({k: np.asarray(arrays[k]) for k in names})
        self.step_count = int(meta["step"])
        self._time = float(meta["time"])
        self.timer.collect(wait=True)  # timings from before the restore describe another run
        self.window.clear()
        self._batch.clear()

    def check_physical(self) -> None:
        """CheckpointError unless the current state (just restored) is within the family's
        :meth:`sanity_bounds`: a checkpoint's arrays are checked finite when read, but a finite state
        can still be no flow at all (every population 1e30), and a run from it ends in garbage or
        in a divergence far from its cause. The message names the bound that failed."""
        try:
            self.diagnostics()
        except Diverged as exc:
            why = exc.detail.split(";")[0]
            raise CheckpointError(f"the state at step {exc.step} is not physical ({why}); "
                                  "not a state to resume from") from None

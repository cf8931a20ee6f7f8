"""One stepper per kind of lbm2d kernel, chosen once per selection (:func:`stepper_class`).

Every stepper has the same small interface:

- ``Stepper(engine, selection)`` builds what the selection needs (compiles kernels, sets launch
  shapes) and raises if it cannot;
- ``advance(state, n, tracers=None)`` advances the :class:`~.storage.LatticeState` by n steps on
  the current stream (the engine's); a stepper with ``tracer_steps`` calls
  ``tracers.after_step(state.f)`` after each step (one small kernel every tracers.every steps,
  captured in the CUDA graph with the steps), the others ignore ``tracers`` (the engine then cuts
  the batch at the tracer updates);
- ``reset()`` forgets anything tied to the state's arrays (cached CUDA graphs) once they are
  replaced;
- ``device_moments``: whether the one-pass velocity kernel (tracers.cu lbm_velocity) may read the
  stored state (CUDA steppers on two lattices, on a GPU);
- class method ``kernel_specs(preset, selection, compute_capability)``: the modules it compiles
  (``all_kernel_specs``: with the moments and tracer kernels beside it).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..cuda import KernelSpec
from . import reference
from . import temporal_blocking as tb
from .launch import BLOCK, single_step
from .storage import LatticeState
from .tracers import TRACER_SPEC, VELOCITY_SPEC
from .variants import GRAPH_STEPS, SINGLE_STEP, TEMPORAL_BLOCKING


class Stepper(ABC):
    cuda = False  # CUDA kernels that keep the state as lbm_velocity reads it (on two lattices)
    per_step = False  # the stepper launches one step at a time (it can update tracers in between)

    def __init__(self, engine, selection: dict):
        self.selection = dict(selection)
        self.device_moments = engine.backend.is_gpu and self.cuda and selection["streaming"] != "aa"
        self.tracer_steps = self.device_moments and self.per_step

    @abstractmethod
    def advance(self, state: LatticeState, n: int, tracers=None) -> None:
        """Advance ``state`` by n steps (and the tracers with them when ``tracer_steps``)."""

    def reset(self) -> None:  # noqa: B027  (an optional hook: nothing by default)
        """The state's arrays were replaced (nothing to forget by default)."""

    @classmethod
    def kernel_specs(cls, preset, selection: dict, compute_capability: float | None = None) -> list[KernelSpec]:
        return []

    @classmethod
    def all_kernel_specs(cls, preset, selection: dict, compute_capability: float | None = None) -> list[KernelSpec]:
        """The stepper's modules plus the moments and tracer kernels that run beside it."""
        specs = cls.kernel_specs(preset, selection, compute_capability)
        if cls.cuda and selection["streaming"] != "aa":
            specs.append(VELOCITY_SPEC)
        if cls.cuda and preset.tracers.count:
            specs.append(TRACER_SPEC)
        return specs


class ReferenceStepper(Stepper):
    """The array step (NumPy or CuPy): reference.step, or the kernels' shifted fp16 arithmetic."""

    def __init__(self, engine, selection):
        super().__init__(engine, selection)
        self.xp, self.lat = engine.xp, engine.lat

    def advance(self, state, n, tracers=None):
        for _ in range(n):
            self._step(state)

    def _step(self, state):
        xp = self.xp
        if state.f.dtype == np.float16:  # fp16 storage on the array path: the kernels' shifted arithmetic
            if self.lat.dtype != np.float32:
                raise RuntimeError("fp16 storage needs an fp32 preset")
            state.f = reference.step_shifted(xp, state.f.astype(xp.float32), self.lat,
                                             storage=xp.float16).astype(xp.float16)
            return
        reference.step(xp, state.f, state.fn, self.lat)
        state.f, state.fn = state.fn, state.f


class TemporalBlockingStepper(Stepper):
    """P1's stb / srtb / srtb-ws and the wavefront kernel (temporal_blocking.py): ts steps a launch."""

    cuda = True

    def __init__(self, engine, selection):
        super().__init__(engine, selection)
        p = engine.preset
        # The interface temporal_blocking.make_stepper reads (tau, force, u_wall, dtype).
        params = {"tau": p.tau, "force": tuple(p.physics.force), "u_wall": tuple(p.wall_velocity),
                  "dtype": engine.dtype}
        self._step = tb.make_stepper(engine.xp, dict(selection), p, engine.mask, params)

    def advance(self, state, n, tracers=None):
        self._step(state.f, state.fn, n)
        state.f, state.fn = state.fn, state.f

    @classmethod
    def kernel_specs(cls, preset, selection, compute_capability=None):
        return [tb.kernel_spec(selection, preset.physics.dtype)]


class SingleStepStepper(Stepper):
    """The lbm2d.cu kernels, one step a launch (or a batch of steps a CUDA-graph launch)."""

    cuda = True
    per_step = True

    def __init__(self, engine, selection):
        super().__init__(engine, selection)
        p, xp = engine.preset, engine.xp
        self.xp, self.stream, self.open_boundaries = xp, engine.stream, p.open_boundaries
        self.mask, self.node_class, self.node_segment = engine.mask, engine.node_class, engine.node_segment
        # A decomposed slab (engine/lbm2d/decomp_adapter.py) asks for the ROWS instances: its overlap updates
        # the edge rows and the interior rows in separate launches.
        self.launch = ss = single_step(p, selection["storage"], engine.compute_capability(),
                                       rows=getattr(engine, "row_range", False))
        self.k = {role: ss.spec.function(name) for role, name in ss.names.items()}
        if ss.fused_smem > 48 * 1024:  # beyond the default: opt in (sm_70+)
            self.k["fused"].max_dynamic_shared_size_bytes = ss.fused_smem
        T = ss.scalar
        ny, nx = p.shape
        self.ni = (np.int32(nx), np.int32(ny))
        self.whole = (int(ny), (np.int32(0), np.int32(ny)))  # (rows, the kernels' row0, row1)
        self.omega = (T(1.0 / p.tau), T(float(engine.lat.omega_minus)))  # (ω⁺, ω⁻); ω⁻ unused by BGK
        self.force = (T(p.physics.force[0]), T(p.physics.force[1]))
        self.uw = (T(p.wall_velocity[0]), T(p.wall_velocity[1]))
        self.uin = T(p.physics.inlet_velocity)
        self.graphs = {}
        self.graph = selection["graph"] == "on"
        if self.tracer_steps and engine.tracers is not None:  # compile and upload outside any capture
            engine.tracers.prepare(np.float16 if selection["storage"] == "fp16" else engine.dtype)

    @classmethod
    def kernel_specs(cls, preset, selection, compute_capability=None):
        return [single_step(preset, selection["storage"], compute_capability).spec]

    def reset(self):
        self.graphs = {}

    def advance(self, state, n, tracers=None):
        tracers = tracers if self.tracer_steps else None
        if self.graph:
            self._advance_graph(state, n, tracers)
            return
        for _ in range(n):
            self.step(state)
            if tracers is not None:
                tracers.after_step(state.f)

    def step(self, state: LatticeState) -> None:
        """One step: the kernels of this kind, then the open boundaries."""
        self.update(state)
        self.finish(state)

    def update(self, state: LatticeState, rows: tuple[int, int] | None = None) -> None:
        """The first part of a step: this kind's kernels and the open boundaries on rows [r0, r1)
        (a module built with ``row_range``; every node of a row depends only on the rows next to it,
        so updating the rows in parts gives the same bits) or on the whole grid (None), into the
        step's target (state.fn; AA: in place). :meth:`finish` completes the step."""
        if rows is None:
            count, args = self.whole
        else:
            if not self.launch.rows:
                raise RuntimeError("a row range needs the ROWS kernels (the stepper's engine sets row_range)")
            r0, r1 = (int(r) for r in rows)
            count, args = r1 - r0, (np.int32(r0), np.int32(r1))
        if count <= 0:
            return
        self._kernels(state, count, args)
        if self.open_boundaries:
            nx, ny = self.ni
            self.k["open"](((count + 127) // 128, 1, 1), (128, 1, 1), (state.fn, self.mask, nx, ny, self.uin, *args))

    def finish(self, state: LatticeState) -> None:
        """The end of a step whose rows were all updated: the target becomes the state."""
        state.f, state.fn = state.fn, state.f

    def _dims(self, count: int, fused: bool = False):
        ss = self.launch
        if count == self.whole[0]:
            return ss.fused_dims if fused else ss.dims
        return ss.fused_dims_for(count) if fused else ss.dims_for(count)

    @abstractmethod
    def _kernels(self, state: LatticeState, count: int, rows: tuple) -> None:
        """Launch this kind's kernels for one step (state.f → state.fn) on ``count`` rows; ``rows``
        are the kernels' (row0, row1) arguments."""

    def _advance_graph(self, state, n, tracers=None):
        """Each batch of ≤ GRAPH_STEPS steps is one CUDA-graph launch, the tracer updates included.

        Graphs are captured on first use and cached by (steps, current buffer, AA layout, tracer
        clock and ring slot): a graph bakes in the buffer pointers and where in the batch the tracer
        updates fall, and an odd step count ends with the ping-pong roles (or the AA layout, the
        tracer clock and ring slot) changed, so the state after a replay is recorded with the graph.
        The tracers' ring counters are read and written on the device (tracers.py), so a replay at
        any later update is correct.
        """
        def roles():
            tr = (tracers.clock, tracers.slot) if tracers is not None else None
            return state.layout, state.f, state.fn, tr

        def set_roles(r):
            state.layout, state.f, state.fn, tr = r
            if tracers is not None:
                tracers.clock, tracers.slot = tr

        while n > 0:
            m = min(n, GRAPH_STEPS)
            before = roles()
            key = (m, int(state.f.data.ptr), state.layout, before[3])
            entry = self.graphs.get(key)
            if entry is None:
                # Relaxed mode: a lazily loaded module may not be loaded under global capture mode.
                rt = self.xp.cuda.runtime
                self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", None))
                try:
                    for _ in range(m):
                        self.step(state)
                        if tracers is not None:
                            tracers.after_step(state.f)
                except BaseException:
                    set_roles(before)
                    try:
                        self.stream.end_capture()
                    except Exception:
                        pass  # the launch error above is the one to report
                    raise
                graph = self.stream.end_capture()
                after = roles()
                # Capture recorded the launches without running them: restore the roles.
                set_roles(before)
                if len(self.graphs) >= 16:
                    self.graphs.clear()
                entry = self.graphs[key] = (graph, after)
            graph, after = entry
            graph.launch(self.stream)
            set_roles(after)
            n -= m


class TwoKernelStepper(SingleStepStepper):
    """Stream kernel, then collide kernel (the naive baseline)."""

    def _kernels(self, state, count, rows):
        nx, ny = self.ni
        dims = self._dims(count)
        self.k["stream"](dims, BLOCK, (state.f, state.fn, self.mask, nx, ny, *self.uw, *rows))
        self.k["collide"](dims, BLOCK, (state.fn, self.mask, nx, ny, *self.omega, *self.force, *rows))


class FusedStepper(SingleStepStepper):
    """Pull stream + collide in one kernel; with AA streaming, in place in one lattice."""

    def __init__(self, engine, selection):
        super().__init__(engine, selection)
        self.aa = selection["streaming"] == "aa"

    def update(self, state, rows=None):
        if not self.aa:
            super().update(state, rows)
            return
        # AA: in place, one kernel per layout; no open-boundary pass (AA with open boundaries is
        # refused by the variant axes)
        nx, ny = self.ni
        count, args = self.whole if rows is None else (int(rows[1]) - int(rows[0]),
                                                       (np.int32(rows[0]), np.int32(rows[1])))
        if rows is not None and not self.launch.rows:
            raise RuntimeError("a row range needs the ROWS kernels (the stepper's engine sets row_range)")
        if count <= 0:
            return
        kern = self.k["aa_p"] if state.layout == "P" else self.k["aa_q"]
        kern(self._dims(count), BLOCK, (state.f, self.mask, self.node_class, nx, ny, *self.omega, *self.force,
                                        *self.uw, *args))

    def finish(self, state):
        if self.aa:
            state.layout = "Q" if state.layout == "P" else "P"
        else:
            super().finish(state)

    def _kernels(self, state, count, rows):
        nx, ny = self.ni
        ss = self.launch
        self.k["fused"](self._dims(count, fused=True), ss.fused_block,
                        (state.f, state.fn, self.mask, self.node_class, self.node_segment, nx, ny, *self.omega,
                         *self.force, *self.uw, *ss.fused_extra, *rows), shared_mem=ss.fused_smem)


# The kernel axis' choices (variants.py) -> their stepper.
STEPPERS: dict[str, type[Stepper]] = {"reference": ReferenceStepper, "two-kernel": TwoKernelStepper,
                                      "fused": FusedStepper,
                                      **dict.fromkeys(TEMPORAL_BLOCKING, TemporalBlockingStepper)}
if set(STEPPERS) != set(SINGLE_STEP + TEMPORAL_BLOCKING):
    raise ImportError("lbm2d: every kernel choice needs a stepper (steppers.STEPPERS)")


def stepper_class(selection: dict) -> type[Stepper]:
    return STEPPERS[selection["kernel"]]

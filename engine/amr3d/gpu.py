"""CuPy side of P0's kernel ladder: compiled kernels, launch shapes, the 26 shell streams and CUDA
graphs. One :class:`LadderStepper` per (rung, storage) selection; the engine owns the buffers.

Timing phases, as P0's table: ``inner`` (the inner-point kernel), ``shell`` (first shell-kernel
start to last shell-kernel end: events on the engine's stream before the fork and after the join
of the class streams), ``step`` for rungs that are one kernel (naive, uniform). With the graph on,
one ``step`` phase covers the whole replay (the graph hides the split).
"""
from __future__ import annotations

import numpy as np

from ..cuda import KernelSpec
from . import d3q27, ladder
from . import kernel_names as names_of

GRAPH_STEPS = 16  # steps per captured graph at most


def graph_batch(n: int) -> int:
    """The steps of the next graph replay of n: the largest power of two ≤ n, at most GRAPH_STEPS.
    Whatever the batches, a stepper captures 1, 2, 4, 8 and 16 steps (each for both buffer roles of
    an odd count) and no more: a capture of a deep tree's 16 steps is thousands of nodes."""
    return min(GRAPH_STEPS, 1 << (n.bit_length() - 1))


def _prelude(model) -> str:
    """The velocity set and the collision model's macros (collision.Collision; None = P0's BGK).
    The prelude is part of the KernelSpec, so each model is its own compilation and cache entry."""
    return ladder.velocity_prelude(d3q27.C, d3q27.W_EXACT, model)


def _csm(model) -> bool:
    return model is not None and model.csm


def kernel_spec(m: int, model=None):
    """The ladder's kernels for leaves of m³ points as one NVRTC compilation (engine/cuda.py),
    with the collision operator ``model`` (collision.Collision; None = P0's BGK); with the CSM also
    its pre-pass kernels, after the others (which every model compiles alike)."""
    names = (*names_of.ladder(m).values(), *names_of.shell_classes(m), *names_of.UNIFORM.values())
    if _csm(model):
        names += tuple(names_of.csm(m).values())
    return KernelSpec(ladder.SOURCE, names, prelude=_prelude(model))


COUPLING_SOURCE = "cuda/amr3d/coupling.cu"
FIXUP_STENCILS = (8, 27)  # coarse interpolation: P0's trilinear, or quadratic (docs/amr3d.md)


def _coupling_names(model) -> dict[str, str]:
    out = dict(names_of.COUPLING)
    out.update({f"interp{s}": names_of.interpolate(s) for s in FIXUP_STENCILS})
    if _csm(model):
        out.update(names_of.CSM_FIX)
    return out


def coupling_spec(model=None):
    """The level-coupling kernels (shaders/cuda/amr3d/coupling.cu) as one NVRTC compilation (the
    fix-up collides with ``model``, as the ladder kernels of the same run)."""
    return KernelSpec(COUPLING_SOURCE, tuple(_coupling_names(model).values()), prelude=_prelude(model))


def coupling_kernels(model=None) -> dict:
    get = coupling_spec(model).function
    return {key: get(name) for key, name in _coupling_names(model).items()}


def kernels(m: int, model=None) -> dict:
    get = kernel_spec(m, model).function
    # (naive16, uniform16: fp16 storage beyond P0; the shifted populations, d3q27.cuh load_pop/store_pop)
    out = {key: get(name) for key, name in {**names_of.ladder(m), **names_of.UNIFORM}.items()}
    out["classes"] = [get(name) for name in names_of.shell_classes(m)]
    if _csm(model):
        out.update({key: get(name) for key, name in names_of.csm(m).items()})
    return out


def _grid(n: int) -> tuple[int, int, int]:
    return (max(1, -(-int(n) // ladder.BLOCK)), 1, 1)


class LadderStepper:
    """Advances f (and its twin buffer) by whole steps with one rung of the ladder.

    ``rung``: naive | split | templates | sorted | apart | uniform; ``m``, ``shape``: the storage the
    buffers hold (leaves of m³ in a lx × ly × lz periodic arrangement — for 'apart' in the apart
    storage's order, storage.py — or the uniform lattice for 'uniform');
    ``model``: the collision operator (collision.Collision; None = P0's BGK), compiled in. With
    Kobayashi's CSM the rung's kernels read the coefficient array ``coef`` (one float a point; a
    new one unless given), which each step's pre-pass fills first (:meth:`csm_prepass`; a tree's
    level runs it itself, tree_stepper.CupyKernels, and launches with ``prepass=False``);
    ``copies`` (dst, src): the shared nodes' copies and owners (ladder.shared_copies; computed
    for the periodic box when not given). ``fp16``: the buffers hold fp16 storage (the shifted
    populations as IEEE half, d3q27.cuh load_pop/store_pop; naive and uniform only).
    """

    def __init__(self, xp, stream, rung: str, m: int, shape, omega: float, accel, timer, uniform_shape=None,
                 nbr=None, model=None, coef=None, copies=None, fp16: bool = False, uploaded=None):
        self.xp, self.stream, self.rung, self.m, self.timer = xp, stream, rung, m, timer
        if fp16 and rung not in ("naive", "uniform"):
            raise ValueError(f"fp16 storage runs the naive and uniform kernels, not {rung}")
        if fp16 and _csm(model):
            raise ValueError("les = csm runs on fp32 storage (the fp16 kernels take no coefficient array)")
        self.fp16 = fp16
        self.model = model
        self.csm = _csm(model)
        if self.csm and rung in ("uniform", "apart"):
            raise ValueError("les = csm runs on leaves of m³ points (its gradient is taken inside each leaf), "
                             f"not on the {rung} storage")
        self.k = kernels(m, model)
        self.scalars = (np.float32(omega), *(np.float32(a) for a in accel))
        # nbr: an explicit neighbour table (one level of an octree, engine/amr3d/interface.py);
        # otherwise the periodic arrangement ``shape`` of P0's box
        table = ladder.periodic_neighbours(tuple(shape)) if nbr is None else np.asarray(nbr, np.int32)
        self.nleaf = int(table.shape[0])
        seg = ladder.sorted_segments(m, self.nleaf)
        self.sorted_threads = int(seg[-1])
        if uploaded is None:
            self.nbr, self.shell, self.seg = xp.asarray(table), xp.asarray(ladder.shell_list(m)), xp.asarray(seg)
        else:  # the caller's one upload of many tables (uploads.py): ladder_tables' arrays on the device
            self.nbr, self.shell, self.seg = uploaded
        self.uniform_shape = uniform_shape
        self.coef = None
        if self.csm:
            self.coef = coef if coef is not None else xp.zeros(self.nleaf * m**3, np.float32)
            if int(self.coef.size) != self.nleaf * m**3:
                raise ValueError(f"CSM coefficient array of {self.coef.size} values for {self.nleaf * m**3} points")
            if copies is None:
                if nbr is not None:
                    raise ValueError("les = csm on an explicit neighbour table needs its shared copies")
                copies = ladder.shared_copies(table, None, m)
            self.copy_dst, self.copy_src = (xp.asarray(np.ascontiguousarray(a, np.int64)) for a in copies)
        self._class_streams = None
        self._graphs: dict = {}

    @staticmethod
    def ladder_tables(m: int, nbr) -> tuple:
        """The host tables a stepper with neighbour table ``nbr`` uploads (nbr, shell, seg), for a
        caller that uploads them with others (``uploaded``)."""
        table = np.asarray(nbr, np.int32)
        return table, ladder.shell_list(m), ladder.sorted_segments(m, int(table.shape[0]))

    # ---- the CSM's pre-pass (collision.py, ladder.cu) -----------------------------------------
    def csm_velocity(self, f, fn) -> None:
        """u of every point's pulled populations into planes 0..2 of ``fn`` (free until the rung)."""
        n = self.nleaf * self.m**3
        self.k["csm_velocity"](_grid(n), (ladder.BLOCK,), (f, fn, self.nbr, np.int32(self.nleaf)))

    def csm_coefficient(self, fn) -> None:
        """C of every point from the velocities in ``fn`` (differences inside each leaf), then the
        owner's C at every other copy of a shared node."""
        n = self.nleaf * self.m**3
        self.k["csm_coefficient"](_grid(n), (ladder.BLOCK,), (fn, self.coef, np.int32(self.nleaf)))
        nc = int(self.copy_dst.size)
        if nc:
            self.k["csm_copies"](_grid(nc), (ladder.BLOCK,), (self.coef, self.copy_dst, self.copy_src, np.int32(nc)))

    def csm_prepass(self, f, fn) -> None:
        self.csm_velocity(f, fn)
        self.csm_coefficient(fn)

    # ---- one step, f -> fn --------------------------------------------------------------------
    def launch(self, f, fn, timed: bool, phase=None, prepass: bool = True) -> None:
        m, nl = self.m, np.int32(self.nleaf)
        k, s = self.k, self.scalars
        phase = phase or (self.timer.phase if timed else _no_phase)
        if self.csm:
            if prepass:
                with phase("les"):
                    self.csm_prepass(f, fn)
            s = s + (self.coef,)  # the kernels' last argument
        if self.rung == "uniform":
            nz, ny, nx = self.uniform_shape
            with phase("step"):
                dims = (np.int32(nx), np.int32(ny), np.int32(nz))
                k["uniform16" if self.fp16 else "uniform"](_grid(nx * ny * nz), (ladder.BLOCK,), (f, fn, *dims, *s))
            return
        if self.rung == "naive":
            with phase("step"):
                k["naive16" if self.fp16 else "naive"](_grid(self.nleaf * m**3), (ladder.BLOCK,),
                                                       (f, fn, self.nbr, nl, *s))
            return
        if self.rung == "apart":  # one contiguous run each (ladder.cu "The apart storage")
            with phase("inner"):
                k["inner_apart"](_grid(self.nleaf * (m - 2) ** 3), (ladder.BLOCK,), (f, fn, nl, *s))
            with phase("shell"):
                k["shell_apart"](_grid(self.nleaf * int(self.shell.size)), (ladder.BLOCK,),
                                 (f, fn, self.nbr, self.shell, nl, *s))
            return
        with phase("inner"):
            k["inner"](_grid(self.nleaf * (m - 2) ** 2 * m), (ladder.BLOCK,), (f, fn, nl, *s))  # whole x-rows
        with phase("shell"):
            if self.rung == "split":
                ns = int(self.shell.size)
                k["shell"](_grid(self.nleaf * ns), (ladder.BLOCK,), (f, fn, self.nbr, self.shell, np.int32(ns), nl, *s))
            elif self.rung == "sorted":
                k["sorted"](_grid(self.sorted_threads), (ladder.BLOCK,), (f, fn, self.nbr, self.seg, nl, *s))
            else:  # templates: the 26 class kernels concurrently, forked from and joined to the stream
                self._launch_classes(f, fn, nl, s)

    def _launch_classes(self, f, fn, nl, s) -> None:
        cp = self.xp
        if self._class_streams is None:
            self._class_streams = [cp.cuda.Stream(non_blocking=True) for _ in ladder.SHELL_CLASSES]
        fork = cp.cuda.Event(disable_timing=True)
        fork.record(self.stream)
        joins = []
        for kern, g, st in zip(self.k["classes"], ladder.SHELL_CLASSES, self._class_streams):
            st.wait_event(fork)
            kern(_grid(self.nleaf * ladder.class_points(self.m, g)), (ladder.BLOCK,), (f, fn, self.nbr, nl, *s),
                 stream=st)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(st)
            joins.append(ev)
        for ev in joins:
            self.stream.wait_event(ev)

    # ---- n steps ------------------------------------------------------------------------------
    def advance(self, bufs: list, n: int, graph: bool) -> None:
        """Advance ``bufs = [f, fn]`` by n steps in place of the list (the roles swap every step)."""
        if not graph:
            for _ in range(n):
                self.launch(bufs[0], bufs[1], timed=True)
                bufs.reverse()
            return
        with self.timer.phase("step", steps=n):
            while n:
                c = graph_batch(n)
                # both buffers: a restore allocates a new pair, and the pool may give one of them an
                # old address (a graph keyed on bufs[0] alone could replay into a freed bufs[1])
                key = (c, int(bufs[0].data.ptr), int(bufs[1].data.ptr))
                g = self._graphs.get(key)
                if g is None:
                    rt = self.xp.cuda.runtime
                    self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", None))
                    try:
                        for i in range(c):
                            self.launch(bufs[i % 2], bufs[1 - i % 2], timed=False)
                    except BaseException:
                        try:
                            self.stream.end_capture()
                        except Exception:
                            pass  # the launch error above is the one to report
                        raise
                    g = self._graphs[key] = self.stream.end_capture()
                g.launch(self.stream)
                if c % 2:  # the roles swap every step: an odd replay leaves them swapped
                    bufs.reverse()
                n -= c


class _NoPhase:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _no_phase(name, steps=1):
    return _NoPhase()

"""The compact family's variant axes (docs/architecture.md, "The variant registry"), registered by
:func:`register` (called once when engine.py is imported).

- ``solver``: how the tridiagonal systems are solved — one choice per strategy of the solver registry
  (engine/compact/solvers/: ``thomas``, ``cr``, ``pcr``, ``cr-pcr``, ``scan`` — the GPU default —,
  ``scan-tile``, ``window``, ``stream``, ``cgs``, ``bicgstab``, ``gtsv2``), each with its own doc and availability
  check. The reference is ``thomas`` on NumPy; every solver must match it to round-off.
- ``y-direction``: ``strided`` (solve the y-lines in place, element stride nx), ``transpose``
  (transpose, solve contiguous lines, transpose back — P4's finding) or ``window`` (the y-lines in place
  by the window solver, the x-lines by ``solver``). strided and transpose: no effect on NumPy or in 1D;
  window runs the window solver's NumPy mirror there.
- ``kernel``: the explicit right-hand side — ``array`` (whole-array slices, the reference) or the
  stencil framework's loop engines (``stencil-host``, ``cuda``, ``cuda-autotune``: P2's auto-tuner
  picks the launch of the generated kernel on live steps), or ``fused`` — computed inside the scan
  solver's launch, so a derivative reads f once and writes f' once (the GPU default; the other solvers
  need a separate right-hand side and say so).
- ``batching`` (Navier–Stokes): how many tridiagonal solves the 14 derivatives take (below).
- ``pointwise`` (Navier–Stokes): the pointwise physics around the derivatives — ``array`` (whole-array
  operations, the reference) or ``fused`` (3 CUDA kernels per evaluation, shaders/cuda/compact/ns_pointwise.cu).
- ``graph``: ``on`` replays each batch of steps as one CUDA graph (engine/compact/graph.py); ``off`` launches
  every kernel from the host.
"""
from __future__ import annotations

import dataclasses

from .. import registry
from ..stencil.variants import register_stencil_choices
from . import solvers
from .batched import grouping_reason

FAMILY = "compact"
# Every solver against the NumPy Thomas reference after the registry test's steps (fp64 equivalence
# presets): different elimination orders differ by round-off amplified by the closure rows' condition.
SOLVER_RTOL, SOLVER_ATOL = 1e-9, 1e-10


def register() -> None:
    strategies = solvers.SOLVERS.values()
    registry.register_axis(FAMILY, "solver", default={"numpy": "thomas", "cupy": "scan"},
                           doc="tridiagonal solver: " + "; ".join(f"{s.name}: {s.doc}" for s in strategies))
    for s in strategies:
        registry.register_choice(FAMILY, "solver", s.name, backends=s.backends, doc=s.doc,
                                 reference={"solver": "thomas"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL,
                                 check=s.unavailable)

    # GPU default strided: with W lines a block sharing whole sectors and a stack's y-lines in one launch,
    # the scan kernel's strided y-lines made the Navier–Stokes steps faster than P4's transposes (one large
    # y-derivative: a wash; docs/benchmarks/compact-scan-h100-2026-11-27). P4's finding was for one line a
    # block.
    registry.register_axis(FAMILY, "y-direction", default={"numpy": "strided", "cupy": "strided"},
                           doc="y-derivatives: strided (solve the y-lines in place, element stride nx; the "
                               "default), transpose (tiled transpose, contiguous solve, transpose back; P4's "
                               "choice) or window (the y-lines in place by the window solver, x by the selected "
                               "solver)")
    registry.register_choice(FAMILY, "y-direction", "strided", doc="y-lines solved in place",
                             reference={"y-direction": "strided"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL,
                             check=_strided_check)
    registry.register_choice(FAMILY, "y-direction", "transpose", doc="transpose, solve, transpose back",
                             reference={"y-direction": "strided"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL,
                             check=_transpose_check)
    # window for y, the selected solver (scan by default) for x: the window kernel reads a strided y-line's
    # rows as one coalesced row segment a warp and has lines × segments threads, 2–4× the scan kernel's
    # bandwidth on y-lines at 2048² and 4096²; on x-lines (staged through shared memory) it is 4× slower
    # than scan (docs/compact.md, "solver = window")
    registry.register_choice(FAMILY, "y-direction", solvers.Y_WINDOW,
                             doc="y-lines solved in place by the window solver (segments with halos, a warp per 32 "
                                 "adjacent columns: coalesced rows), x-lines by the selected solver",
                             reference={"y-direction": "strided"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL,
                             check=_window_check)

    registry.register_axis(FAMILY, "kernel", default={"numpy": "array", "cupy": "fused"},
                           doc="explicit right-hand side: array (whole-array slices, the reference), the stencil "
                               "framework's loop engines (stencil-host, cuda, cuda-autotune) or fused (computed "
                               "inside the scan solver's launch: one pass over memory per derivative)")
    registry.register_choice(FAMILY, "kernel", "array", backends=("numpy", "cupy"),
                             doc="xp-generic whole-array slices (schemes.rhs)", reference={"kernel": "array"},
                             rtol=SOLVER_RTOL, atol=SOLVER_ATOL)
    # The framework's host engine performs the reference's operations in the same order (bit for bit
    # on the host; 1e-12 leaves room for nothing but that); generated CUDA is compiled without FMA.
    register_stencil_choices(FAMILY, {"kernel": "array"}, host_rtol=1e-12, device_rtol=SOLVER_RTOL)
    # ... plus the family's absolute floor: a device candidate also runs the device default solver,
    # whose round-off differs from the NumPy Thomas reference on values near zero.
    registry.register_choice(FAMILY, "kernel", "fused", backends=("cupy",),
                             doc="the right-hand side (interior and P4's closure rows) computed in the scan solver's "
                                 "launch from the line in shared memory: f read once, f' written once "
                                 "(shaders/cuda/compact/scan.cu)",
                             reference={"kernel": "array"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL, check=_fused_check)
    kernels = registry.axes(FAMILY)["kernel"].choices
    for name, choice in list(kernels.items()):
        if name != "array":
            kernels[name] = dataclasses.replace(choice, atol=SOLVER_ATOL)
    _register_batching()
    _register_pointwise()
    _register_graph()


def _fused_check(backend, selection, config):
    solver = solvers.SOLVERS.get(selection.get("solver"))
    if solver is None or not solver.fuses_rhs:
        name = solvers.fusing()
        return f"kernel = fused computes the right-hand side inside the {name} solver's launch (choose solver = {name})"
    return solver.unavailable(backend, selection, config)


def _grouped_check(backend, selection, config):
    return grouping_reason(config, selection)


def _transpose_check(backend, selection, config):
    """Transposing is a way to solve y-lines: a problem without them has nothing to transpose (a request
    is refused with this line instead of being accepted and doing nothing). ``strided``, the default,
    stays available everywhere: it names no work of its own."""
    missing = _no_y_lines(config)
    return None if missing is None else f"{missing} to transpose"


def _no_y_lines(config) -> str | None:
    physics = getattr(config, "physics", None)
    if physics is None:
        return None
    if physics.problem == "advection1d":
        return "a 1D problem has no y-lines"
    if physics.problem == "derivative" and physics.direction == "x":
        return "this benchmark differentiates along x: no y-lines"
    return None


def _window_check(backend, selection, config):
    """The window solver on the y-lines: something to solve there (as transpose), and strided lines, which
    batching = grouped does not batch."""
    missing = _no_y_lines(config)
    if missing is not None:
        return f"{missing} for the window solver"
    if selection.get("batching") == "grouped":
        return "batching = grouped batches transposed y-lines (choose another batching first)"
    return None


def _strided_check(backend, selection, config):
    # a solver that takes contiguous lines only transposes the y-lines whatever y-direction says
    if selection.get("batching") == "grouped" and not solvers.contiguous_only(selection.get("solver")):
        return "batching = grouped batches transposed y-lines (choose another batching first)"
    return None


def _register_batching() -> None:
    """``batching`` (P4: "14 variables grouped 8 + 6"): the Navier–Stokes problem stacks the variables
    that need the same derivative — (u, v, T) and the four fluxes — so each stack is one batch of
    tridiagonal systems (engine/compact/batched.py); ``per-variable`` solves them one at a time;
    ``grouped`` also puts a stack's x-lines and a stack's transposed y-lines in one batch (P4's 8 + 6:
    2 solves per evaluation) where x and y share the matrix (nx = ny, the same closures) under
    ``y-direction = transpose`` — elsewhere it is unavailable with the reason (and ``strided`` is while
    grouped runs). The scalar problems have one variable: stacked and per-variable are the same there,
    grouped is unavailable. NumPy: all three bit for bit equal."""
    registry.register_axis(FAMILY, "batching", default="stacked",
                           doc="Navier–Stokes: stacked (the variables needing one derivative solved as one batch: "
                               "4 solves per evaluation), per-variable (one solve per variable: 14) or grouped "
                               "(P4's 8 + 6: x-lines and transposed y-lines of a pass in one batch: 2; square grid, "
                               "same closures on both axes, y-direction = transpose)")
    registry.register_choice(FAMILY, "batching", "per-variable", doc="one variable per solve (P4's baseline)",
                             reference={"batching": "per-variable"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL)
    registry.register_choice(FAMILY, "batching", "stacked", doc="one solve per stack of variables",
                             reference={"batching": "per-variable"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL)
    registry.register_choice(FAMILY, "batching", "grouped",
                             doc="P4's 8 + 6: one solve per pass, x-lines and transposed y-lines together",
                             reference={"batching": "per-variable"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL,
                             check=_grouped_check)


def _register_pointwise() -> None:
    """``pointwise`` (Navier–Stokes): the primitives, Euler fluxes, viscous stresses and their flux terms,
    out = -(DF + DG) and the characteristic boundary lines (nscbc.py) of each evaluation of dU/dt —
    ``array``: whole-array operations, dozens of launches per evaluation on the GPU, the NSCBC ones on
    single lines (the reference); ``fused``: 3 kernels per evaluation (2 for Euler), ns_pointwise.cu.
    No effect on the scalar problems. Tolerance: the kernels repeat the reference's operations in its
    order without FMA (bit for bit in the g++ emulation), so a fused candidate differs from the NumPy
    reference only by the device default solver's round-off, as every other device choice here."""
    registry.register_axis(FAMILY, "pointwise", default={"numpy": "array", "cupy": "fused"},
                           doc="Navier–Stokes pointwise physics: array (whole-array operations, the reference) or "
                               "fused (CUDA: primitives + Euler fluxes, viscous stresses, -(DF + DG) with the "
                               "characteristic/extrapolated/held boundary lines: 3 launches per evaluation)")
    registry.register_choice(FAMILY, "pointwise", "array", backends=("numpy", "cupy"),
                             doc="whole-array NumPy/CuPy operations (navier_stokes.py, nscbc.py)",
                             reference={"pointwise": "array"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL)
    registry.register_choice(FAMILY, "pointwise", "fused", backends=("cupy",),
                             doc="3 CUDA kernels per evaluation (ns_euler, ns_viscous, ns_combine; Euler: 2)",
                             reference={"pointwise": "array"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL)


# What a captured step cannot contain (graph.py): an allocation (the graph would keep a pointer the pool
# hands out again), a host read of a device value (a sync: illegal under capture) or a launch the host
# chooses from live timings. The choices below do one of these inside every step.
GRAPH_REFUSED_SOLVERS = {
    "gtsv2": "cuSPARSE gtsv2StridedBatch allocates its work buffer on every call and is not documented as "
             "capture-safe",
    "cgs": "the iterative solvers read their convergence on the host after every iteration",
    "bicgstab": "the iterative solvers read their convergence on the host after every iteration",
}
GRAPH_KERNELS = ("fused", "cuda", "cuda-vec")


def _graph_check(backend, selection, config):
    if selection.get("graph") != "on":
        return None
    solver = selection.get("solver")
    if solver in GRAPH_REFUSED_SOLVERS:
        return f"graph = on cannot capture solver = {solver}: {GRAPH_REFUSED_SOLVERS[solver]}"
    kernel = selection.get("kernel")
    if kernel not in GRAPH_KERNELS:
        why = ("the auto-tuner picks its launches from live timings" if kernel == "cuda-autotune"
               else "its whole-array operations allocate temporaries on every call")
        return f"graph = on cannot capture kernel = {kernel}: {why} (choose kernel = {' or '.join(GRAPH_KERNELS)})"
    physics = getattr(config, "physics", None)
    if (physics is not None and physics.problem == "navier-stokes"
            and selection.get("pointwise", "array") != "fused"):
        return ("graph = on captures the Navier–Stokes step with pointwise = fused only (the array "
                "operations allocate temporaries on every call)")
    return None


def _register_graph() -> None:
    """``graph``: ``on`` captures a batch of up to graph.GRAPH_STEPS steps as one CUDA graph and replays it
    (engine/compact/graph.py: every work buffer allocated before the capture, none inside it); ``off``
    launches each kernel from the host. The replay runs the kernels the host would launch, in its order, on
    the same buffers: the state is the uncaptured one bit for bit (tests/equivalence/test_compact_graph_gpu.py).
    NumPy has no graphs: ``on`` is a CuPy choice (a preset's ``graph = "on"`` falls back to ``off`` there)."""
    registry.register_axis(FAMILY, "graph", default="off",
                           doc="on: each batch of steps is one CUDA-graph replay (no host launch per kernel); "
                               "off: the host launches every kernel")
    registry.register_choice(FAMILY, "graph", "off", backends=("numpy", "cupy"),
                             doc="one host launch per kernel", reference={"graph": "off"},
                             rtol=SOLVER_RTOL, atol=SOLVER_ATOL)
    registry.register_choice(FAMILY, "graph", "on", backends=("cupy",),
                             doc="a batch of steps captured once as a CUDA graph, then replayed",
                             reference={"graph": "off"}, rtol=SOLVER_RTOL, atol=SOLVER_ATOL, check=_graph_check)

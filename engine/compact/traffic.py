"""Kernels and ideal bytes of one Navier–Stokes step (docs/compact.md, "What a step must move").

Each entry is one kernel of the step (or a group of identical launches): how many launches, and the bytes
it must move at the least — every array it reads once and every array it writes once, whole-grid arrays
only (the boundary lines' few values are left out). The sum over a step divided by the copy bandwidth is
the step's ideal time; the bench reports the measured step against it (``bytes_per_update`` is this sum
per grid point, so the bench's roofline column is ideal time ÷ step time).

Modelled for the GPU path the step's launches are known for: ``pointwise = fused`` and ``kernel = fused``
(the scan solver's derivative; stacked or per-variable batching, strided or transposed y-lines, grouped
batching) — what ``graph = on`` captures. Other selections return None (their element-wise operations
and separate right-hand sides launch a number of kernels that depends on CuPy's internals).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTraffic:
    name: str
    phase: str
    launches: int
    words: int  # values moved per grid point (× points × item size = bytes)


def _stack_derivative(name: str, sd, nv: int) -> list[KernelTraffic]:
    """batched.StackDerivative under kernel = fused on nv variables: read f, write f' (2 nv words); the
    transposes of y-lines under y-direction = transpose read and write the stack twice more."""
    out = [KernelTraffic(name, "derivative", sd.launches(nv), 2 * nv)]
    if sd.solver.transpose:
        out.append(KernelTraffic(f"{name} transposes", "transpose", 2, 4 * nv))
    return out


def _grouped(name: str, gd) -> list[KernelTraffic]:
    """batched.GroupedDerivative under kernel = fused: fy's transpose in, the derivative of both halves
    (one launch per spacing), the y-half's transpose out."""
    nv = gd.nv
    return [KernelTraffic(f"{name} transposes", "transpose", 2, 4 * nv),
            KernelTraffic(name, "derivative", gd.launches(), 4 * nv)]


def step_kernels(engine) -> list[KernelTraffic] | None:
    """The kernels of one step of a CompactNavierStokes engine, or None where the selection is not modelled."""
    sel = engine.selection
    ns = engine.ns
    if ns.fused is None or sel.get("kernel") != "fused":  # (fused pointwise kernels exist on the GPU only)
        return None
    viscous = ns.gas.viscous
    n_prim = 3 if viscous else 2
    rate: list[KernelTraffic] = [KernelTraffic("ns_euler", "other", 1, 4 + n_prim + 1 + 8)]
    if viscous:
        if ns.grouped:
            rate += _grouped("∂(u, v, T)", ns.grad)
        else:
            rate += _stack_derivative("∂x (u, v, T)", ns.dx, 3) + _stack_derivative("∂y (u, v, T)", ns.dy, 3)
        # reads u, v, GX, GY and F, G's rows 1–3; writes τ and those rows
        rate.append(KernelTraffic("ns_viscous", "other", 1, 2 + 3 + 3 + 6 + 3 + 6))
    if ns.grouped:
        rate += _grouped("∂F/∂x, ∂G/∂y", ns.flux)
    else:
        rate += _stack_derivative("∂F/∂x", ns.dx, 4) + _stack_derivative("∂G/∂y", ns.dy, 4)
    rate.append(KernelTraffic("ns_combine", "other", 1, 4 + 4 + 4))
    out = [KernelTraffic(k.name, k.phase, 4 * k.launches, 4 * k.words) for k in rate]  # 4 evaluations
    # RK4 stages on (4, ny, nx) stacks: first reads k, U and writes acc, tmp; the middle two read acc too;
    # the last reads acc, k, U and writes U
    out.append(KernelTraffic("rk4 stages", "update", 4, 4 * (4 + 5 + 5 + 4)))
    for f in ns.filters:
        out.append(KernelTraffic(f"filter {f.axis} right-hand side", "filter", 1, 8))
        out.append(KernelTraffic(f"filter {f.axis} solve", "filter", f.solver.launches(4), 8))
        if f.solver.transpose:
            out.append(KernelTraffic(f"filter {f.axis} transposes", "filter", 2, 16))
    if ns.filters:
        held = len(ns.held)
        extrapolated = 2 * len(ns.extrapolated)
        if held or extrapolated:  # boundary lines only: launches, no whole-grid traffic
            out.append(KernelTraffic("filter boundary lines", "filter", 2 * held + extrapolated, 0))
    return out


def summary(kernels: list[KernelTraffic], points: int, itemsize: int) -> dict:
    """Launches and ideal bytes per step."""
    return {"kernels_per_step": sum(k.launches for k in kernels),
            "ideal_bytes_per_step": sum(k.words for k in kernels) * points * itemsize}

"""Measuring a family's registered variant matrix (the data behind ``nagare bench``).

For each bench case (a problem size) and each selection (one axis changed from the backend's
default selection, every registered choice in turn, plus any extra selections the family lists),
build the engine, warm up (compilation and caches stay out of the numbers), then time whole
batches with the engine's own device timers until ``min_time`` seconds have been measured.
Unavailable selections are reported with their reason, like P1's "cannot run" cells (one row for a
selection refused for the same reason in every case, labelled "every case (N)", after the measured rows).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from . import registry
from .benchspec import BenchSpec
from .errors import NagareError
from .families import create_engine, engine_class, family_module
from .presets import load_preset


@dataclass
class BenchResult:
    case: str
    selection: dict
    label: str
    ok: bool
    reason: str = ""
    steps: int = 0
    ms_per_step: float = 0.0
    updates_per_s: float = 0.0
    gbytes_per_s: float = 0.0
    roofline_pct: float = 0.0
    speedup: float | None = None
    phases: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def selections(family: str, backend: str, preset, with_choices: dict | None = None) -> list[tuple[str, dict]]:
    """The default selection first, then each registered choice of each axis changed alone.
    ``with_choices`` ({axis: choice}, ``nagare bench --with``): added to every cell, its label suffixed
    " + axis=choice"; a cell that changes one of those axes itself would repeat another and is left out."""
    base = registry.default_selection(family, backend)
    listed = engine_class(family).bench_spec().selections
    if listed is not None:
        out = [(lbl, dict(base, **sel)) for lbl, sel in listed(backend)]
    else:
        out = [("default", dict(base))]
        for axis, ax in registry.axes(family).items():
            for name in ax.choices:
                if name == base[axis]:
                    continue
                out.append((f"{axis}={name}", dict(base, **{axis: name})))
    if not with_choices:
        return out
    suffix = " + " + ",".join(f"{a}={c}" for a, c in with_choices.items())
    return [(lbl + suffix, dict(sel, **with_choices)) for lbl, sel in out
            if not any(sel[a] != base[a] for a in with_choices)]


def parse_with(family: str, items: list[str] | None) -> dict:
    """``--with AXIS=CHOICE`` items as {axis: choice}, each checked against the family's registry."""
    out: dict = {}
    axes = registry.axes(family)
    for item in items or []:
        axis, eq, choice = item.partition("=")
        if not eq or axis not in axes:
            raise NagareError(f"bench {family}: --with {item!r}: expected AXIS=CHOICE, AXIS one of "
                              f"{', '.join(axes)}")
        if choice not in axes[axis].choices:
            raise NagareError(f"bench {family}: --with {item!r}: {axis} has no choice {choice!r}; its choices: "
                              f"{', '.join(axes[axis].choices)}")
        out[axis] = choice
    return out


def measure(engine, warmup_steps: int, batch: int, min_time: float, max_steps: int, min_steps: int = 0) -> dict:
    """Time whole batches for about ``min_time`` seconds of device time, and at least ``min_steps``
    steps (rounded up to whole batches).

    Steps are queued asynchronously on a GPU, so the host's clock says when launches were queued,
    not when they ran: fast launches (a CUDA graph of 16 steps) queue seconds of work in a fraction
    of ``min_time``. One synchronised calibration batch after the warm-up gives the time per batch,
    which sets how many batches to queue; the host clock only stops a run that is slower than that.
    """
    engine.step(warmup_steps)
    engine.batch_report(wait=True)  # discard warm-up samples (and wait for them)
    t = time.perf_counter()
    engine.step(batch)
    calib = engine.batch_report(wait=True)  # calibration batch, not part of the result
    per_batch = calib.ms_per_step * batch / 1e3 if calib.steps else 0.0
    if not per_batch > 0:  # no device time came back: the host's time of that synchronised batch
        per_batch = time.perf_counter() - t
    want = batch * max(1, min(max_steps // batch, math.ceil(min_time / max(per_batch, 1e-9))))
    least = batch * math.ceil(min_steps / batch)
    want = max(want, least)
    done, t0 = 0, time.perf_counter()
    while done < want:
        engine.step(batch)
        done += batch
        if done >= least and time.perf_counter() - t0 > min_time:
            break
    rep = engine.batch_report(wait=True)
    return {"steps": rep.steps, "ms_per_step": rep.ms_per_step, "updates_per_s": rep.updates_per_s,
            "gbytes_per_s": rep.gbytes_per_s,
            "roofline_pct": 100 * (rep.roofline_fraction or 0.0), "phases": rep.phase_ms_per_step,
            "extra": rep.extra}


def grid_case(spec: BenchSpec, label: str) -> list[str] | None:
    """Preset overrides of a grid-size case "NXxNY" (or "NXxNYxNZ") for a family whose bench spec
    names its grid axes; None when the label is not such a size."""
    axes = spec.grid_axes
    parts = label.split("x")
    if not axes or len(parts) != len(axes) or not all(p.isdigit() for p in parts):
        return None
    return [f"grid.{axis}={int(p)}" for axis, p in zip(axes, parts)]


def bench_case_list(family: str, cls, backend: str, cases: list[str] | None) -> list[tuple[str, list[str]]]:
    """The (label, overrides) cases to run: all of the family's, or those asked for, in its order,
    then any other grid sizes asked for (``grid_case``). A label that is neither is an error: it would
    otherwise measure nothing, silently."""
    spec = cls.bench_spec()
    if not spec.preset:
        raise NagareError(f"bench {family}: this family has no benchmark")
    own = spec.cases(backend)
    if not cases:
        return own
    known = [label for label, _ in own]
    extra = []
    for c in dict.fromkeys(cases):
        if c in known:
            continue
        overrides = grid_case(spec, c)
        if overrides is None:
            axes = spec.grid_axes
            sizes = f", or any grid size {'x'.join(a.upper() for a in axes)}" if axes else ""
            raise NagareError(f"bench {family}: no case {c!r} on {backend}; its cases: {', '.join(known)}"
                              f"{sizes}")
        extra.append((c, overrides))
    return [(label, ov) for label, ov in own if label in cases] + extra


def case_preset(spec: BenchSpec, overrides: list[str]):
    """The preset of a bench case: the family's bench preset, or the one an "@name" first override
    names, with the case's overrides."""
    base = spec.preset
    if overrides and overrides[0].startswith("@"):  # a case on another preset of the family
        base, overrides = overrides[0][1:], overrides[1:]
    return load_preset(base, overrides, backend=None)


def check_only(family: str, backend: str, case_list, only: list[str] | None, with_choices: dict | None = None) -> None:
    """Every ``--only`` text must be in some cell's variant label: one that selects nothing would
    measure nothing and say so only by an empty table (the CLI asks before measuring)."""
    if not only:
        return
    spec = engine_class(family).bench_spec()
    labels = set()
    for _, overrides in case_list:
        labels.update(lab for lab, _ in selections(family, backend, case_preset(spec, overrides), with_choices))
    lost = [s for s in dict.fromkeys(only) if not any(s in lab for lab in labels)]
    if lost:
        raise NagareError(f"bench {family}: --only {', '.join(map(repr, lost))} matches no variant label; "
                          f"labels: {', '.join(sorted(labels))}")


def run_bench(family: str, backend, *, cases: list[str] | None = None, min_time: float = 0.5,
              warmup_steps: int = 5, batch: int | None = None, max_steps: int = 20000, progress=None,
              only: list[str] | None = None, on_result=None, jobs: int = 0,
              with_choices: dict | None = None) -> list[BenchResult]:
    """``only``: keep the selections whose label contains one of these substrings.
    ``with_choices``: {axis: choice} added to every selection (:func:`selections`).
    ``on_result(result)`` is called as each cell is measured (long matrices show progress).
    ``batch``: steps per ``engine.step`` call; by default the family's ``BenchSpec.batch``.
    ``jobs`` > 1: a family whose BenchSpec has ``precompile`` compiles the kernels of the selected
    cells first in that many processes (CuPy's disk cache then serves every case)."""
    family_module(family)
    cls = engine_class(family)
    spec = cls.bench_spec()
    case_list = bench_case_list(family, cls, backend.name, cases)
    results: list[BenchResult] = []
    if batch is None:
        batch = spec.batch
    precompile = spec.precompile
    if jobs > 1 and precompile is not None and backend.is_gpu:
        preset = load_preset(spec.preset, [], backend=None)
        sels = [sel for label, sel in selections(family, backend.name, preset, with_choices)
                if not only or any(s in label for s in only)]
        if progress:
            progress(f"compiling the kernels of {len(sels)} cells in {jobs} processes")
        precompile(sels, preset, jobs)
    # a selection that cannot run here for the same reason in every case (a CUDA-only choice on NumPy)
    # is one row, not one a case: its first, relabelled at the end
    refused: dict[str, tuple[BenchResult, int]] = {}
    for label, overrides in case_list:
        preset = case_preset(spec, overrides)
        baseline = None
        for sel_label, sel in selections(family, backend.name, preset, with_choices):
            if only and not any(s in sel_label for s in only):
                continue
            if progress:
                progress(f"{label}: {sel_label}")
            reasons = [registry.unavailable_reason(registry.axes(family)[a].choices[c], backend.name, sel, preset)
                       for a, c in sel.items()]
            reasons = [r for r in reasons if r]
            if reasons:
                reason = "; ".join(dict.fromkeys(reasons))
                first, seen = refused.get(sel_label, (None, 0))
                if first is not None and first.reason == reason:
                    refused[sel_label] = (first, seen + 1)
                    continue
                results.append(BenchResult(label, sel, sel_label, False, reason=reason))
                refused.setdefault(sel_label, (results[-1], 1))
                if on_result:
                    on_result(results[-1])
                continue
            try:
                engine = create_engine(preset, backend, variants=sel)
                m = measure(engine, warmup_steps, batch, min_time, max_steps, spec.min_steps(label))
                engine.diagnostics()  # a variant that diverges is reported, not timed
            except NagareError as exc:
                results.append(BenchResult(label, sel, sel_label, False, reason=str(exc)))
                if on_result:
                    on_result(results[-1])
                continue
            except Exception as exc:  # out of memory, compile failure: a cell, not a crash
                results.append(BenchResult(label, sel, sel_label, False, reason=f"{type(exc).__name__}: {exc}"))
                if on_result:
                    on_result(results[-1])
                continue
            finally:
                engine = None
            r = BenchResult(label, sel, sel_label, True, **m)
            if baseline is None:
                baseline = r
            r.speedup = baseline.ms_per_step / r.ms_per_step if r.ms_per_step else None
            results.append(r)
            if on_result:
                on_result(r)
    everywhere = [first for first, seen in refused.values() if len(case_list) > 1 and seen == len(case_list)]
    for first in everywhere:
        first.case = f"every case ({len(case_list)})"
    return [r for r in results if not any(r is e for e in everywhere)] + everywhere  # after the measured rows

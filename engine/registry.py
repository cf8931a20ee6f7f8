"""The variant registry: every optimisation axis of every family, registered explicitly.

A *selection* is a dict ``{axis: choice}`` with one choice per axis of a family. Each registered
choice names the backends it runs on, an availability check (which may depend on the rest of the
selection and the engine's configuration, e.g. "tile does not fit in shared memory") and the
reference it must match. One test (tests/equivalence/test_registry.py) walks this registry, so a
new choice is tested the moment it is registered; ``nagare bench`` walks it too.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import VariantUnavailable

log = logging.getLogger("nagare")

# (backend_name, selection, config) -> None if the choice can run, else the reason it cannot.
AvailabilityCheck = Callable[[str, dict, Any], str | None]


@dataclass(frozen=True)
class Choice:
    family: str
    axis: str
    name: str
    backends: frozenset[str]
    doc: str = ""
    # The selection (partial; other axes keep their defaults) and backend of the reference this
    # choice must match. None means "this choice is itself a reference".
    reference: dict | None = None
    rtol: float = 1e-5
    atol: float = 0.0
    check: AvailabilityCheck | None = None


@dataclass
class Axis:
    family: str
    name: str
    doc: str
    default: dict[str, str]  # per backend
    live: bool = True  # switchable between steps without reset
    choices: dict[str, Choice] = field(default_factory=dict)
    # The typed value of a choice (choices are strings: "4" -> 4 with int, "16x8" -> (16, 8) with a
    # tile parser); str by default.
    parse: Callable[[str], Any] = str

    def typed(self, value) -> Any:
        """The value of a choice of this axis as its code uses it (``parse`` applied)."""
        return self.parse(value)


_REGISTRY: dict[str, dict[str, Axis]] = {}


def register_axis(family: str, name: str, *, default: str | dict[str, str], doc: str = "",
                  live: bool = True, parse: Callable[[str], Any] = str) -> Axis:
    """``parse``: the choice's typed value (e.g. ``int`` for step counts), see :func:`typed`."""
    if isinstance(default, str):
        default = {"numpy": default, "cupy": default}
    axes = _REGISTRY.setdefault(family, {})
    if name in axes:
        raise ValueError(f"axis {family}.{name} registered twice")
    axes[name] = Axis(family, name, doc, dict(default), live, parse=parse)
    return axes[name]


def register_choice(family: str, axis: str, name: str, *, backends=("numpy", "cupy"), doc: str = "",
                    reference: dict | None = None, rtol: float = 1e-5, atol: float = 0.0,
                    check: AvailabilityCheck | None = None) -> Choice:
    ax = _REGISTRY[family][axis]
    if name in ax.choices:
        raise ValueError(f"choice {family}.{axis}={name} registered twice")
    ch = Choice(family, axis, name, frozenset(backends), doc, reference, rtol, atol, check)
    ax.choices[name] = ch
    return ch


def families() -> list[str]:
    return sorted(_REGISTRY)


def axes(family: str) -> dict[str, Axis]:
    return _REGISTRY.get(family, {})


def typed(family: str, selection: dict) -> dict[str, Any]:
    """``selection`` with each value of a registered axis parsed by its axis (``int`` for "4", a
    tile parser for "16x8", ...); keys that are not axes of ``family`` pass through unchanged.
    A value its parser refuses raises that parser's error (ValueError)."""
    fam = axes(family)
    return {k: fam[k].typed(v) if k in fam else v for k, v in selection.items()}


def all_choices() -> list[Choice]:
    return [c for fam in _REGISTRY.values() for ax in fam.values() for c in ax.choices.values()]


def unavailable_reason(choice: Choice, backend: str, selection: dict, config: Any) -> str | None:
    if backend not in choice.backends:
        if choice.backends == {"cupy"}:
            return "needs a CUDA GPU (CuPy backend)"
        return f"runs only on the {'/'.join(sorted(choice.backends))} backend"
    if choice.check is not None:
        return choice.check(backend, selection, config)
    return None


def _gpu_present() -> bool:
    from .backend import cupy_available  # probes CuPy and the device: only when a refusal needs it

    return cupy_available()[0]


def remedy(choice: Choice, backend: str, selection: dict, config: Any) -> str:
    """What does run on this machine instead of ``choice``: the other choices of its axis that run
    with the rest of ``selection`` on ``backend``, and ``--backend cupy`` only where a CUDA GPU is
    usable (a refusal that sends the user to another GPU-only choice on a machine without one
    sends them the wrong way)."""
    fam = axes(choice.family)[choice.axis]
    here = [name for name, other in fam.choices.items() if name != choice.name
            and unavailable_reason(other, backend, {**selection, choice.axis: name}, config) is None]
    tips = [f"what runs here: {choice.axis} = {' or '.join(here)}"] if here else []
    if backend not in choice.backends and "cupy" in choice.backends:
        tips.append("--backend cupy runs it (this machine has a CUDA GPU)" if _gpu_present() else
                    "this machine has no usable CUDA GPU")
    return "; ".join(tips) or f"no other {choice.axis} runs with the rest of this selection"


def refusal(choice: Choice, backend: str, selection: dict, config: Any, reason: str) -> str:
    """The one line that refuses ``choice``: why, and what runs here instead."""
    instead = remedy(choice, backend, selection, config)
    return f"variant {choice.axis}={choice.name} cannot run here: {reason}; {instead}"


def default_selection(family: str, backend: str) -> dict:
    return {name: ax.default[backend] for name, ax in axes(family).items()}


def parse_choice(ax: Axis, value, backend: str | None = None) -> str:
    """The choice ``value`` names; a one-line refusal listing the axis' choices otherwise — with a
    ``backend``, those of that backend first and the others as needing another backend, so that the
    list does not offer a GPU-only choice as the fix on a machine running NumPy."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if text not in ax.choices:
        names = list(ax.choices)
        here = [n for n in names if backend is None or backend in ax.choices[n].backends]
        elsewhere = [n for n in names if n not in here]
        also = ""
        if elsewhere:
            needs = {b for n in elsewhere for b in ax.choices[n].backends}
            where = ("the cupy backend with a CUDA GPU" if needs == {"cupy"}
                     else f"the {'/'.join(sorted(needs))} backend")
            also = f" (also, on {where}: {', '.join(elsewhere)})"
        raise VariantUnavailable(
            f"unknown choice {value!r} for variant axis '{ax.name}' of {ax.family}; "
            f"allowed{' here' if elsewhere else ''}: {', '.join(here)}{also}")
    return text


def resolve_selection(family: str, backend: str, config: Any, preset_defaults: dict | None = None,
                      requested: dict | None = None) -> dict:
    """Defaults ← preset's [variants] ← explicitly requested choices.

    A preset default that cannot run on this backend falls back to the backend's default with one
    log line; an explicitly requested choice that cannot run raises VariantUnavailable.
    """
    sel = default_selection(family, backend)
    fam = axes(family)
    for values in (preset_defaults or {}, requested or {}):
        for axis, value in values.items():
            if axis not in fam:
                raise VariantUnavailable(
                    f"unknown variant axis '{axis}' for {family}; allowed: {', '.join(fam)}")
            sel[axis] = parse_choice(fam[axis], value, backend)
    # A preset's choice that cannot run with the rest falls back to the backend default; a default or
    # an explicit request that cannot run is left for the choice it conflicts with to fall back (e.g.
    # y-direction = strided, default or requested, against a preset's batching = grouped: grouped
    # goes). Passes until nothing changes; what still cannot run then is refused.
    for _ in range(len(sel) + 1):
        changed = False
        for axis, name in list(sel.items()):
            reason = unavailable_reason(fam[axis].choices[name], backend, sel, config)
            if reason is None:
                continue
            fallback = fam[axis].default[backend]
            if (requested and axis in requested) or fallback == name:
                continue  # a request is kept (refused below if it still cannot run); a default has no fallback
            log.info("nagare: variant %s=%s cannot run here (%s); using %s", axis, name, reason, fallback)
            sel[axis], changed = fallback, True
        if not changed:
            break
    # The refusal names the root cause: a requested choice this backend cannot run at all first (the
    # axes it conflicts with are only its consequence), then the other requests, then the rest.
    def cause_first(axis):
        choice = fam[axis].choices[sel[axis]]
        asked = bool(requested) and axis in requested
        return (not (asked and backend not in choice.backends), not asked)

    for axis in sorted(sel, key=cause_first):
        choice = fam[axis].choices[sel[axis]]
        reason = unavailable_reason(choice, backend, sel, config)
        if reason is not None:
            raise VariantUnavailable(refusal(choice, backend, sel, config, reason))
    return sel

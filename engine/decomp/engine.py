"""The decomposed engine: a family's engine whose state lives in N sub-domains.

A family opts in by listing :class:`Decomposable` first among its bases. Constructing it with a
preset whose ``[decomp] parts`` is > 1 (or with ``parts=`` / ``overlap=`` / ``transport=``
keywords) builds :func:`decomposed_class` of it instead: the same class (``family``, registry,
presets, fields, checkpoints) with the stepping replaced by the family's adapter
(engine/decomp/stencil.py, engine/decomp/lbm2d.py).

The family's own global arrays stay allocated and are the *gathered* state: after steps they are
stale until something reads them (fields, diagnostics, checkpoint), which gathers the owned rows
of every sub-domain into them first; whatever writes them (restore, a random state, a variant
switch's conversion) scatters them back into the sub-domains. So checkpoints are whole (one
file, the family's own arrays, independent of N) and resume on any N, decomposed or not.
"""
from __future__ import annotations

import importlib
from functools import cache

from ..errors import VariantUnavailable
from .config import DecompConfig, DecompError
from .transport import make_transport

# family -> module:class of its adapter (engine/decomp/<module>.py)
ADAPTERS = {"diffusion3d": "stencil:StencilAdapter", "wave2d": "stencil:StencilAdapter",
            "lbm2d": "lbm2d:LBMAdapter"}
OVERLAP_CHOICES = ("off", "on")
_DECOMP_KW = ("parts", "overlap", "transport")


def adapter_class(family: str):
    if family not in ADAPTERS:
        raise DecompError(f"engine family '{family}' is not decomposed (decomposed: {', '.join(ADAPTERS)})")
    mod, name = ADAPTERS[family].split(":")
    return getattr(importlib.import_module(f"{__package__}.{mod}"), name)


def _preset_parts(preset) -> int:
    cfg = getattr(preset, "decomp", None)
    return int(cfg.parts) if cfg is not None else 1


class Decomposable:
    """Mixin for a family engine: construction with ``parts > 1`` (preset or keyword) builds the
    decomposed class. Must come before the family's Engine base."""

    def __new__(cls, preset=None, backend=None, variants=None, **kw):
        if not getattr(cls, "_decomposed", False) and (any(k in kw for k in _DECOMP_KW)
                                                        or _preset_parts(preset) > 1):
            cls = decomposed_class(cls)
        return object.__new__(cls)


def _gathering(name: str):
    """A method that gathers the sub-domains into the global state, then runs the family's."""
    def method(self, *args, **kwargs):
        self._sync_global()
        return getattr(super(DecomposedMixin, self), name)(*args, **kwargs)

    method.__name__ = name
    return method


@cache
def decomposed_class(cls):
    """The decomposed variant of the family engine class ``cls`` (one per class): the mixin, plus a
    gathering wrapper for each extra reader of the global state the family's adapter names
    (lbm2d: canonical_state, macroscopic)."""
    extra = {name: _gathering(name) for name in adapter_class(cls.family).readers if hasattr(cls, name)}
    return type(f"Decomposed{cls.__name__}", (DecomposedMixin, cls), {"__module__": __name__, **extra})


class DecomposedMixin:
    _decomposed = True

    def __init__(self, preset, backend, variants=None, *, parts: int | None = None, overlap: str | None = None,
                 transport: str | None = None):
        cfg = getattr(preset, "decomp", None) or DecompConfig()
        self.parts = int(parts if parts is not None else cfg.parts)
        self.overlap = overlap if overlap is not None else cfg.overlap
        if self.overlap not in OVERLAP_CHOICES:
            raise DecompError(f"overlap = {self.overlap!r}; allowed: {', '.join(OVERLAP_CHOICES)}")
        self._transport_name = transport if transport is not None else cfg.transport
        self.adapter = None
        self._stale = False  # True: the sub-domains are ahead of the gathered global state
        super().__init__(preset, backend, variants)

    # ---- the two copies of the state ---------------------------------------------------------
    def _sync_global(self) -> None:
        if self._stale and self.adapter is not None:
            self.adapter.gather()
        self._stale = False

    def _apply_selection(self, old, new):
        if old:
            self._sync_global()  # the family converts the current state
        super()._apply_selection(old, new)
        if self.adapter is None:
            self.transport = make_transport(self._transport_name, self.backend, self.parts, self.stream)
        cls = adapter_class(self.family)
        self.adapter = cls(self, dict(new), self.transport)
        self.adapter.scatter()
        self._stale = False

    def _load_state_arrays(self, arrays):
        super()._load_state_arrays(arrays)
        if self.adapter is not None:
            self.adapter.scatter()
        self._stale = False

    def _advance(self, n):
        t = self.adapter.advance(n, self.overlap == "on")
        self._stale = True
        return t

    def synchronize(self):
        self.transport.synchronize()
        super().synchronize()

    # ---- readers of the global state: gather first ------------------------------------------
    def state_arrays(self):
        self._sync_global()
        return super().state_arrays()

    def fields(self):
        self._sync_global()
        return super().fields()

    def field(self, name):
        self._sync_global()
        return super().field(name)

    def device_diagnostics(self):
        self._sync_global()
        return super().device_diagnostics()

    def sanity_bounds(self):
        self._sync_global()
        return super().sanity_bounds()

    # ---- the overlap axis (a decomposition setting, shown and switched like a variant) ------
    def estimated_bytes(self):
        """What the engine's device (the first GPU) needs: the family's estimate (its global
        arrays stay allocated as the gathered state) plus the sub-domains on that device — all of
        them on one device (twice the family's), one of N with NCCL (the others on their own GPUs)."""
        family = super().estimated_bytes()
        if self._uses_nccl():
            return family + -(-family // self.parts)
        return 2 * family

    def _uses_nccl(self) -> bool:
        from .transport import nccl_unavailable

        name = self._transport_name
        return self.parts > 1 and (name == "nccl" or (name == "auto"
                                                       and nccl_unavailable(self.backend, self.parts) is None))

    @property
    def variants(self):
        out = dict(super().variants)
        adapter = adapter_class(self.family)
        for axis, info in out.items():  # choices the decomposition cannot run, with the reason
            for choice, reason in info["choices"].items():
                if reason is None:
                    info["choices"][choice] = adapter.unavailable(dict(self.selection, **{axis: choice}),
                                                                  self.backend.name)
        out["overlap"] = {"current": self.overlap, "live": True,
                          "doc": "off: update each sub-domain, then exchange halos; on: boundary slabs first, "
                                 "halo exchange while the interior runs (same results bit for bit)",
                          "choices": dict.fromkeys(OVERLAP_CHOICES)}
        return out

    def set_variant(self, **changes):
        if "overlap" in changes:
            value = str(changes.pop("overlap"))
            if value not in OVERLAP_CHOICES:
                raise VariantUnavailable(f"overlap={value!r}; allowed: {', '.join(OVERLAP_CHOICES)}")
            self.overlap = value
        if changes:
            trial = dict(self.selection, **{k: str(v) for k, v in changes.items()})
            reason = adapter_class(self.family).unavailable(trial, self.backend.name)
            if reason:
                raise VariantUnavailable(f"{', '.join(f'{k}={v}' for k, v in changes.items())} with "
                                         f"{self.parts} sub-domains: {reason}")
            super().set_variant(**changes)

    def timing_extra(self):
        out = dict(super().timing_extra())
        out["decomp"] = {**self.transport.describe(), "overlap": self.overlap, **self.adapter.describe()}
        return out

    def check_restorable(self, arrays):
        self._sync_global()
        super().check_restorable(arrays)

"""The decomposed engine: a family's engine whose state lives in N sub-domains.

:func:`decomposed_class` of a family's engine class and its adapter (engine/decomp/adapter.py) is
the same class (``family``, registry, presets, fields, checkpoints) with the stepping replaced by
the adapter's. engine/families.py ``engine_class_for`` picks it when the preset's ``[decomp]
parts`` is > 1 or ``parts=`` / ``overlap=`` / ``transport=`` keywords are given.

The family's own global arrays stay allocated and are the *gathered* state: after steps they are
stale until something reads them (fields, diagnostics, checkpoint), which gathers the owned rows
of every sub-domain into them first; whatever writes them (restore, a random state, a variant
switch's conversion) scatters them back into the sub-domains. So checkpoints are whole (one
file, the family's own arrays, independent of N) and resume on any N, decomposed or not.
"""
from __future__ import annotations

from functools import cache

from ..errors import VariantUnavailable
from .config import DecompConfig, DecompError
from .transport import make_transport, nccl_unavailable

OVERLAP_CHOICES = ("off", "on")


def wants_decomposition(engine_class: type, preset, options: dict) -> bool:
    """Whether ``preset`` with the keyword ``options`` asks for the decomposed ``engine_class``."""
    if getattr(engine_class, "_decomposed", False):
        return False
    cfg = getattr(preset, "decomp", None)
    return bool(options) or (cfg is not None and int(cfg.parts) > 1)


def _gathering(name: str):
    """A method that gathers the sub-domains into the global state, then runs the family's."""
    def method(self, *args, **kwargs):
        self._sync_global()
        return getattr(super(DecomposedMixin, self), name)(*args, **kwargs)

    method.__name__ = name
    return method


@cache
def decomposed_class(cls, adapter):
    """The decomposed variant of the family engine class ``cls`` split by ``adapter`` (one per
    pair): the mixin, plus a gathering wrapper for each extra reader of the global state the
    adapter names (lbm2d: canonical_state, macroscopic)."""
    extra = {name: _gathering(name) for name in adapter.readers if hasattr(cls, name)}
    return type(f"Decomposed{cls.__name__}", (DecomposedMixin, cls),
                {"__module__": __name__, "adapter_class": adapter, **extra})


class DecomposedMixin:
    _decomposed = True
    adapter_class: type  # the family's Adapter (set by decomposed_class)

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
        self.adapter = self.adapter_class(self, dict(new), self.transport)
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
        name = self._transport_name
        return self.parts > 1 and (name == "nccl" or (name == "auto"
                                                       and nccl_unavailable(self.backend, self.parts) is None))

    @property
    def variants(self):
        out = dict(super().variants)
        adapter = self.adapter_class
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
            reason = self.adapter_class.unavailable(trial, self.backend.name)
            if reason:
                raise VariantUnavailable(f"{', '.join(f'{k}={v}' for k, v in changes.items())} with "
                                         f"{self.parts} sub-domains: {reason}")
            super().set_variant(**changes)

    def kernel_specs(self, selection=None):
        specs = list(super().kernel_specs(selection))
        if specs:  # none: nothing compiles here (NumPy, or a selection that cannot run)
            sel = dict(self.selection if selection is None else selection)
            for spec in self.adapter_class.kernel_specs(self, sel):
                if spec not in specs:
                    specs.append(spec)
        return specs

    def timing_extra(self):
        out = dict(super().timing_extra())
        out["decomp"] = {**self.transport.describe(), "overlap": self.overlap, **self.adapter.describe()}
        return out

    def check_restorable(self, arrays):
        self._sync_global()
        super().check_restorable(arrays)

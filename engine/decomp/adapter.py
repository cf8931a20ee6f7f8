"""What a family declares to be split into sub-domains: its :class:`Adapter`.

A family that can be split exposes its adapter as ``DecompAdapter`` in its package (beside
``Engine`` and ``Preset``; engine/families.py finds it there) and bases its preset on
:class:`~.config.DecomposablePreset` (the ``[decomp]`` section and its split axis). The adapter
lives in the family's folder (``decomp_adapter.py``); this package holds only the mechanism —
slabs, transports, the decomposed engine class, the scaling bench — and knows no family.

An adapter instance is built by the decomposed engine for one variant selection and owns the
sub-domains' state: :meth:`scatter` fills them from the engine's global arrays, :meth:`gather`
writes their owned rows back, :meth:`advance` steps them (halos exchanged through the
transport). Its class also says which selections cannot run decomposed, which extra CUDA
modules the slabs compile, and the sizes ``nagare bench scale`` measures.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from .engine import decomposed_class, wants_decomposition


class Adapter(ABC):
    """Built as ``Adapter(engine, selection, transport)``: the sub-domains of ``engine`` for one
    variant selection, exchanging halos through ``transport``."""

    # methods of the family engine (beyond the contract's) that read its global state: the
    # decomposed class gathers the sub-domains before each
    readers: ClassVar[tuple[str, ...]] = ()
    # nagare bench scale: {"gpu" | "cpu": {"weak" | "strong": grid size (x first)}}; a weak size is
    # per sub-domain (its slowest axis grows with N), a strong one the whole grid; cpu: small NumPy
    # stand-ins
    scaling: ClassVar[dict[str, dict[str, tuple[int, ...]]]] = {}
    scaling_preset: ClassVar[dict] = {}  # preset sections of those runs besides the grid and [decomp]

    @classmethod
    def engine_class_for(cls, engine_class: type, preset, **options) -> type:
        """``engine_class`` decomposed by this adapter when the preset's ``[decomp] parts`` is > 1 or
        ``options`` (``parts=``, ``overlap=``, ``transport=``) ask for it; else ``engine_class``."""
        if wants_decomposition(engine_class, preset, options):
            return decomposed_class(engine_class, cls)
        return engine_class

    @classmethod
    def unavailable(cls, selection: dict, backend_name: str) -> str | None:
        """Why a variant selection cannot run decomposed (None: it can)."""
        return None

    @classmethod
    def kernel_specs(cls, engine, selection: dict) -> list:
        """CUDA modules the slabs compile besides the family's own (warm-up: engine/cuda.py)."""
        return []

    @abstractmethod
    def scatter(self) -> None:
        """Fill every sub-domain from the engine's global state."""

    @abstractmethod
    def gather(self) -> None:
        """Write every sub-domain's owned rows into the engine's global state."""

    @abstractmethod
    def advance(self, n: int, overlap: bool) -> float:
        """``n`` steps of every sub-domain, halos exchanged; the physical time advanced."""

    @abstractmethod
    def exchange_once(self) -> None:
        """One halo exchange of the state a step writes (the scaling bench's exchange timing)."""

    @abstractmethod
    def describe(self) -> dict:
        """The split for ``timings.extra["decomp"]``: rows per part, halo, bytes per exchange."""

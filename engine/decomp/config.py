"""The ``[decomp]`` preset section, the decomposable preset block, and the row split of a grid.

    [decomp]
    parts = 2          # sub-domains along the slowest axis (`nagare run --gpus 2` sets it)
    overlap = "off"    # "on": boundary slabs first, halo exchange while the interior runs
    transport = "auto" # "same-device" | "nccl" | "auto"

A family that can be split bases its preset model on :class:`DecomposablePreset` and names its
split axis there (``decomp_split``). The section is excluded from the preset's dump
(``Field(exclude=True)``): a checkpoint, a preset hash and a resume check never see it, so a
state is independent of N.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ..errors import NagareError
from ..presets import PresetBase, Strict

TRANSPORTS = ("auto", "same-device", "nccl")
MAX_PARTS = 64


class DecompConfig(Strict):
    parts: int = Field(1, ge=1, le=MAX_PARTS,
                       description="sub-domains along the slowest axis (one per GPU with NCCL; on one device "
                                   "or NumPy: N sub-domains with same-device halo copies); 1 = not decomposed")
    overlap: Literal["off", "on"] = Field("off", description="on: update the boundary slabs first and exchange "
                                                             "halos while the interior runs")
    transport: Literal["auto", "same-device", "nccl"] = Field(
        "auto", description="halo transport: same-device copies, NCCL point-to-point (one process, one "
                            "stream per GPU), or auto (NCCL when the backend is CuPy and as many GPUs are visible)")


class DecompError(NagareError, ValueError):
    """A decomposition that cannot be built (too many parts for the grid, an unsupported variant)."""


@dataclass(frozen=True)
class SplitAxis:
    """The axis a family splits (its slowest): the grid key that sizes it (``nz``), the unit its
    messages name ("z plane"), and the halo width there — the rows a sub-domain must at least own.
    The family's adapter splits exactly this (checked in tests/unit/test_decomp.py)."""
    key: str
    unit: str
    halo: int = 1


class DecomposablePreset(PresetBase):
    """The preset of a family that can run split into sub-domains: the ``[decomp]`` section and
    the loader's refusal of a ``decomp.parts`` the split axis cannot take (one line naming the
    option, the grid key and the axis). A subclass sets ``decomp_split`` and has a ``grid``."""

    decomp_split: ClassVar[SplitAxis]
    decomp: DecompConfig = Field(default_factory=DecompConfig, exclude=True)

    @model_validator(mode="after")
    def _decomp_fits(self):
        axis = self.decomp_split
        why = too_many_parts(getattr(self.grid, axis.key), self.decomp.parts, axis.halo, f"grid.{axis.key}",
                             axis.unit)
        if why:
            raise ValueError(why)
        return self


def too_many_parts(n: int, parts: int, min_rows: int = 1, key: str = "", unit: str = "row") -> str | None:
    """Why ``n`` rows (planes…) cannot be split into ``parts`` sub-domains of at least ``min_rows``
    each, naming decomp.parts, the grid key and the axis; None when they can."""
    if parts >= 1 and n // parts >= min_rows:
        return None
    what = f"{key} = {n} {unit}s" if key else f"{n} {unit}s"
    return (f"decomp.parts = {parts}: {what} cannot be split into {parts} sub-domains of at least {min_rows} "
            f"{unit}{'s' if min_rows > 1 else ''} each (the halo width); use at most {max(n // min_rows, 1)} parts")


def split_rows(n: int, parts: int, min_rows: int = 1, key: str = "", unit: str = "row") -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges [lo, hi) covering 0..n, sizes differing by at most one (the
    first n % parts ranges one row longer); DecompError if a range would hold < ``min_rows`` rows
    (``key``/``unit`` name the axis in the message, e.g. "grid.nz", "z plane")."""
    if parts < 1:
        raise DecompError(f"decomp.parts = {parts}: at least one sub-domain is needed")
    base, extra = divmod(n, parts)
    why = too_many_parts(n, parts, min_rows, key, unit)
    if why:
        raise DecompError(why)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


"""The ``[decomp]`` preset section and the row split of a grid into sub-domains.

    [decomp]
    parts = 2          # sub-domains along the slowest axis (`nagare run --gpus 2` sets it)
    overlap = "off"    # "on": boundary slabs first, halo exchange while the interior runs
    transport = "auto" # "same-device" | "nccl" | "auto"

The section is excluded from the preset's dump (``Field(exclude=True)`` in each family's preset):
a checkpoint, a preset hash and a resume check never see it, so a state is independent of N.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..errors import NagareError
from ..presets import Strict

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


# What each decomposed family splits (its slowest axis) and the halo width there: the rows a
# sub-domain must at least own (engine/decomp/stencil.py, lbm2d.py; checked against them in
# tests/unit/test_decomp.py). The preset loader refuses a decomp.parts the grid cannot take.
SPLIT = {"diffusion3d": ("nz", "z plane"), "wave2d": ("ny", "y row"), "lbm2d": ("ny", "y row")}
HALO = {"diffusion3d": 1, "wave2d": 1, "lbm2d": 1}


def too_many_parts(n: int, parts: int, min_rows: int = 1, key: str = "", unit: str = "row") -> str | None:
    """Why ``n`` rows (planes…) cannot be split into ``parts`` sub-domains of at least ``min_rows``
    each, naming decomp.parts, the grid key and the axis; None when they can."""
    if parts >= 1 and n // parts >= min_rows:
        return None
    what = f"{key} = {n} {unit}s" if key else f"{n} {unit}s"
    return (f"decomp.parts = {parts}: {what} cannot be split into {parts} sub-domains of at least {min_rows} "
            f"{unit}{'s' if min_rows > 1 else ''} each (the halo width); use at most {max(n // min_rows, 1)} parts")


def check_preset_parts(preset) -> None:
    """ValueError (the preset loader's one line) when the family's split axis cannot take decomp.parts."""
    key, unit = SPLIT[preset.engine]
    why = too_many_parts(getattr(preset.grid, key), preset.decomp.parts, HALO[preset.engine], f"grid.{key}", unit)
    if why:
        raise ValueError(why)


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

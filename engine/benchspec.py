"""What ``nagare bench`` needs to know about a family: one declared description per family.

A family returns a :class:`BenchSpec` from ``Engine.bench_spec()``; engine/bench.py reads nothing
else from the engine class. Every field has a default, so a family states only what differs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# backend name -> [(case label, preset overrides)]; overrides that begin with "@NAME" start from the
# family's preset NAME instead of BenchSpec.preset (a case that is a different problem)
CaseList = Callable[[str], list[tuple[str, list[str]]]]
# backend name -> [(selection label, partial selection)]
SelectionList = Callable[[str], list[tuple[str, dict]]]
# (selections, bench preset, jobs) -> None: compile the kernels those cells need, in parallel
Precompile = Callable[[list[dict], Any, int], None]


def no_cases(backend: str) -> list[tuple[str, list[str]]]:
    return []


def no_min_steps(case: str) -> int:
    return 0


@dataclass(frozen=True)
class BenchSpec:
    # The preset every case overrides ("" = the family has no benchmark).
    preset: str = ""
    # The family's own cases (problem sizes) per backend.
    cases: CaseList = no_cases
    # The cells to time; None = the default selection, then every registered choice changed alone.
    selections: SelectionList | None = None
    # Grid axes a --case "NXxNY[xNZ]" sets (any size); () = only the family's own cases.
    grid_axes: tuple[str, ...] = ()
    # Steps per engine.step() call while timing (e.g. whole temporal-blocking launches).
    batch: int = 10
    # Parallel compilation of the selected cells' kernels before timing (``nagare bench --jobs``).
    precompile: Precompile | None = None
    # What one "update" of the M updates/s column is, where it is not one grid point (or particle)
    # advanced one step: printed under the table and in its Markdown.
    update_unit: str = ""
    # case label -> steps a cell of that case runs at least, past ``min_time`` (a case whose figures
    # need events that come every so many steps: an adaptive tree's regrids)
    min_steps: Callable[[str], int] = no_min_steps

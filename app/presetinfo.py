"""What a preset runs on this backend, in words: the `[cpu_overrides]` a NumPy run merges in
change the size (256³ → 64³) or other keys the one-line description states, so the window's
preset list and description say what actually runs (issue 18)."""
from __future__ import annotations

import re
from pathlib import Path

from nagare.engine.presets import load_raw, resolve_path

_SIZE = re.compile(r"\b\d+(?:\s*[×x]\s*\d+){1,2}\b|\b\d+[²³]")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def grid_text(grid: dict) -> str | None:
    """"64³", "8×128×128" or "256×128" from a [grid] table with nx/ny(/nz) (or n)."""
    dims = [grid[k] for k in ("nx", "ny", "nz") if isinstance(grid.get(k), int)]
    if not dims and isinstance(grid.get("n"), int):
        return f"{grid['n']}²"
    if len(dims) >= 2:
        if len(set(dims)) == 1:
            return f"{dims[0]}{'²' if len(dims) == 2 else '³'}"
        return "×".join(str(d) for d in dims)
    return None


def _at(d: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def cpu_note(raw: dict, effective: bool = False) -> str:
    """A short account of the preset's [cpu_overrides], e.g. "64³ on CPU" or
    "on CPU: particles.dp = 0.04, physics.precision = fp64"; "" without overrides.
    ``effective``: ``raw`` is the preset as it runs (overrides and --set merged in), so the keys the
    overrides name are reported with the values that run (a --set may have changed them)."""
    cpu = raw.get("cpu_overrides") or {}
    if not isinstance(cpu, dict) or not cpu:
        return ""
    flat = _flatten(cpu)
    if effective:
        flat = {k: (_at(raw, k) if _at(raw, k) is not None else v) for k, v in flat.items()}
    parts = []
    grid = cpu.get("grid") if isinstance(cpu.get("grid"), dict) else None
    size = None
    if grid is not None:
        merged = dict(raw.get("grid", {}))
        if not effective:
            merged.update(grid)
        size = grid_text(merged)
        flat = {k: v for k, v in flat.items() if not (k.startswith("grid.") and k[5:] in ("nx", "ny", "nz", "n"))}
    # scalars with their value; lists and tables (bodies, seed lists, refine boxes) by name only:
    # their Python repr filled the description box and the preset list
    parts += [f"{k} = {v}" for k, v in flat.items() if not isinstance(v, (list, tuple, dict))]
    named = [k for k, v in flat.items() if isinstance(v, (list, tuple, dict))]
    if named:
        listed = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        parts.append(("and its own " if parts else "its own ") + listed)
    if size and not parts:
        return f"{size} on CPU"
    return (f"{size} on CPU; " if size else "on CPU: ") + ", ".join(parts)


def describe(raw: dict, backend: str) -> str:
    """The preset's description as it runs on ``backend``: on NumPy a size the description names
    (256³, 512×512) is replaced by the size that runs, and the other overrides are appended."""
    desc = str(raw.get("description", ""))
    note = cpu_note(raw) if backend == "numpy" else ""
    if not note:
        return desc
    cpu = raw.get("cpu_overrides") or {}
    if isinstance(cpu.get("grid"), dict):
        merged = dict(raw.get("grid", {}))
        merged.update(cpu["grid"])
        size = grid_text(merged)
        if size and _SIZE.search(desc):
            desc = _SIZE.sub(size, desc, count=1)
    re_ = _flatten(cpu).get("physics.reynolds")
    if isinstance(re_, (int, float)):
        desc = re.sub(r"\bRe\s*=?\s*\d+(?:\.\d+)?", f"Re {re_:g}", desc, count=1)
    return f"{desc} ({note})"


def raw_preset(name_or_path: str | Path) -> dict:
    """The merged TOML of a preset (``extends`` followed), not validated."""
    return load_raw(resolve_path(name_or_path))

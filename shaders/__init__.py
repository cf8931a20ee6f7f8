"""Device code shipped as files: ``cuda/<family>/*.cu|*.cuh`` and ``glsl/*.glsl``.

``source("cuda/diffusion3d/diffusion7.cu")`` returns the text with ``#include "x.cuh"`` lines
resolved against the file's folder and ``cuda/`` (NVRTC in CuPy does not see our folders).
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def path(rel: str) -> Path:
    p = (ROOT / rel).resolve()
    if ROOT not in p.parents or not p.is_file():
        raise FileNotFoundError(f"no shader file {rel!r} under {ROOT}")
    return p


@cache
def source(rel: str) -> str:
    """The file's text with quoted includes inlined (each file once)."""
    return _expand(path(rel), set())


def _expand(p: Path, seen: set[Path]) -> str:
    if p in seen:
        return ""
    seen.add(p)
    # Everything ends up in one NVRTC translation unit: drop include guards of the pragma kind.
    text = re.sub(r"^\s*#\s*pragma\s+once\s*$", "", p.read_text(encoding="utf-8"), flags=re.M)

    def repl(m: re.Match) -> str:
        name = m.group(1)
        for base in (p.parent, ROOT / "cuda", ROOT / "glsl"):
            cand = (base / name).resolve()
            if cand.is_file():
                return f"// ---- {name} ----\n" + _expand(cand, seen)
        raise FileNotFoundError(f"{p.name}: include {name!r} not found")

    return _INCLUDE.sub(repl, text)


def listing(kind: str = "") -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.suffix in {".cu", ".cuh", ".glsl"}
                  and str(p.relative_to(ROOT)).startswith(kind))

"""Write ``body.stl`` next to this script: the default mesh of the amr3d STL-body flow.

The body is a small car-like shape, about 1 × 0.4 × 0.3 (x × y × z; the solver rescales it to the
preset's ``length``): a half-ellipsoidal nose, a cabin hump whose sides lean inwards (tumblehome), a
slightly raised underbody towards the ends, and a cut-off (Kamm) tail. It is one loft of rounded
cross-sections (superellipses) along x, closed by an apex at the nose and a flat fan at the tail, so it
is watertight and consistently oriented by construction, needs no mesh-boolean package, and, at 36
stations of 40 points, stays under 200 kB as binary STL (2880 triangles).

Regenerate with the project's interpreter from the repository root:

    .venv/bin/python presets/amr3d-stl/make_default_stl.py

The output is deterministic; the script checks the mesh (watertight, consistent winding, positive
volume) with trimesh before writing it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import trimesh

STATIONS, AROUND = 36, 40
LENGTH, HALF_WIDTH, BODY_TOP, NOSE = 1.0, 0.2, 0.2, 0.25


def _smooth(x, a, b):
    """0 before a, 1 after b, a cosine ramp between: profiles without kinks shade without seams."""
    t = np.clip((x - a) / (b - a), 0.0, 1.0)
    return 0.5 - 0.5 * np.cos(math.pi * t)


def profile(x):
    """Half-width, underbody height and roof height at x ∈ (0, LENGTH]."""
    nose = np.sqrt(np.clip(1.0 - (1.0 - x / NOSE) ** 2, 0.0, 1.0)) if x < NOSE else 1.0
    half_width = HALF_WIDTH * nose * (1.0 - 0.12 * _smooth(x, 0.7, 1.0))
    bottom = 0.03 * _smooth(x, 0.85, 1.0) + 0.02 * (1.0 - _smooth(x, 0.0, 0.2))
    cabin = 0.11 * _smooth(x, 0.3, 0.5) * (1.0 - _smooth(x, 0.72, 0.95))
    top = BODY_TOP - 0.06 * (1.0 - _smooth(x, 0.0, 0.35)) + cabin
    mid = 0.5 * (top + bottom)
    half_h = 0.5 * (top - bottom) * nose
    return half_width, mid - half_h, mid + half_h, cabin / 0.11


def ring(x):
    """A rounded-rectangle (superellipse, exponent 4) section, counter-clockwise seen from +x; the
    upper half narrows over the cabin."""
    hw, z0, z1, cabin = profile(x)
    t = np.linspace(0.0, 2.0 * math.pi, AROUND, endpoint=False)
    c, s = np.cos(t), np.sin(t)
    y = hw * np.sign(c) * np.abs(c) ** 0.5 * (1.0 - 0.25 * cabin * np.maximum(s, 0.0) ** 2)
    z = 0.5 * (z0 + z1) + 0.5 * (z1 - z0) * np.sign(s) * np.abs(s) ** 0.5
    return np.column_stack([np.full(AROUND, x), y, z])


def build() -> trimesh.Trimesh:
    xs = LENGTH * 0.5 * (1.0 - np.cos(math.pi * np.linspace(0.0, 1.0, STATIONS + 1)[1:]))   # dense at both ends
    rings = [ring(x) for x in xs]
    apex = np.array([[0.0, 0.0, 0.5 * (profile(1e-9)[1] + profile(1e-9)[2])]])
    tail = rings[-1].mean(axis=0, keepdims=True)
    v = np.concatenate([apex, *rings, tail])
    j = np.arange(AROUND)
    jn = (j + 1) % AROUND
    faces = [np.column_stack([np.zeros(AROUND, int), 1 + jn, 1 + j])]       # nose apex
    for i in range(STATIONS - 1):
        a, b = 1 + i * AROUND + j, 1 + i * AROUND + jn
        c, d = a + AROUND, b + AROUND
        faces += [np.column_stack([a, b, d]), np.column_stack([a, d, c])]
    last = 1 + (STATIONS - 1) * AROUND
    faces.append(np.column_stack([np.full(AROUND, len(v) - 1), last + j, last + jn]))   # flat tail
    return trimesh.Trimesh(v, np.concatenate(faces), process=True)


def main() -> Path:
    mesh = build()
    if not (mesh.is_watertight and mesh.is_winding_consistent and mesh.volume > 0):
        raise SystemExit("make_default_stl: the generated mesh is not closed and outward; not written")
    out = Path(__file__).with_name("body.stl")
    mesh.export(out, file_type="stl")     # trimesh writes binary STL
    print(f"{out}: {len(mesh.faces)} triangles, {out.stat().st_size} bytes, extents {mesh.extents.round(4)}, "
          f"volume {mesh.volume:.5f}")
    return out


if __name__ == "__main__":
    main()

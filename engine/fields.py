"""Typed views of an engine's state for rendering and export.

The arrays are the backend's own (device arrays on CuPy): a renderer or exporter decides when and
whether to copy them. Shapes follow NumPy's C order: 2D grids are (ny, nx), 3D grids (nz, ny, nx).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class Grid2D:
    data: Any  # (ny, nx) for scalars, (2, ny, nx) for vectors
    kind: Literal["scalar", "vector"] = "scalar"
    spacing: float = 1.0
    label: str = ""
    units: str = ""
    mask: Any = None  # optional (ny, nx) bool: solid cells drawn as obstacles
    symmetric: bool = False  # colour range symmetric about zero (vorticity, ...)
    # what positions are in ("m"; "–" for a dimensionless coordinate); None: cells × spacing
    length_units: str | None = None
    # the coordinates (x, y) of cell (0, 0)'s lower-left corner: the view draws cell (i, j) over
    # [i, i+1)·spacing and labels its axes (and probes) from here (a domain on [-1, 1]² reads -1)
    origin: tuple[float, float] = (0.0, 0.0)
    # the domain ((x lo, x hi), (y lo, y hi)) in the coordinates the axes read (origin added), when it
    # is not the cells' extent: a finite-difference grid's samples are nodes drawn as the cells centred
    # on them, and its domain [-1, 1]² ends at the first and last node, half a cell inside the image
    domain: tuple[tuple[float, float], tuple[float, float]] | None = None


@dataclass
class Grid3D:
    data: Any  # (nz, ny, nx) or (3, nz, ny, nx)
    kind: Literal["scalar", "vector"] = "scalar"
    spacing: float = 1.0
    label: str = ""
    units: str = ""
    mask: Any = None
    symmetric: bool = False
    # solid bodies as triangle meshes drawn as lit surfaces in the 3D view: a tuple of host NumPy
    # (vertices (V, 3) float32 (x, y, z), faces (F, 3) int32) in world units: a vertex at i·spacing
    # lies on sample i; the same arrays every frame (the view uploads a mesh only when they change)
    surfaces: tuple = ()
    # "cell": sample (i, j, k) stands for the cell [i, i+1)·spacing (the grid families); "node": it
    # is the value at the point i·spacing (amr3d's sampled octree, whose walled axes keep the far
    # face: n = D/spacing + 1 samples). The view and the export centre node samples on their points.
    centering: Literal["cell", "node"] = "cell"
    extent: tuple | None = None  # the domain's size (x, y, z) in world units, when not n × spacing
    length_units: str | None = None  # as Grid2D.length_units


@dataclass
class Particles:
    positions: Any  # (n, 2) or (n, 3)
    attributes: dict[str, Any] = field(default_factory=dict)  # name -> (n,) arrays
    label: str = ""
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # domain box (lo, hi)
    spacing: float | None = None  # particle spacing (dp): 3D sprites are drawn this wide
    solids: tuple = ()  # obstacles/bodies as axis-aligned boxes ((lo...), (hi...)), drawn as surfaces
    # (T, n, 3) trail of each particle (3D), drawn as line segments: axis 0 in time order (oldest
    # first) or a ring whose slot after the newest sample is NaN for every particle; NaN for
    # samples not yet written and parked particles. Device or host arrays (the view copies to host)
    trails: Any = None
    length_units: str = "m"  # what the positions are in (SPH: SI metres; amr3d: level-0 lattice units)
    attribute_units: dict[str, str] = field(default_factory=dict)  # name -> unit shown on the colour bar


@dataclass
class Boxes:
    """Axis-aligned boxes (octree leaves) with their level. Boxes that change come in new arrays:
    a display keeps one copy per set of arrays and builds their lines again only for new ones."""

    lo: Any  # (n, 3)
    hi: Any  # (n, 3)
    level: Any = None  # (n,)
    label: str = ""
    levels: tuple | None = None  # the distinct levels in ``level`` when known on the host (a legend needs no read)


@dataclass
class Profile1D:
    """Values along a line (1D problems): drawn as a line plot, with the exact solution beside it
    when the engine knows one."""

    x: Any  # (n,) coordinates
    data: Any  # (n,) values
    exact: Any = None  # (n,) exact solution at the same time, or None
    label: str = ""
    units: str = ""
    length_units: str | None = None  # what x is in (as Grid2D.length_units)


Field = Grid2D | Grid3D | Particles | Boxes | Profile1D
